"""tasks"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0001_tasks"))


def downgrade() -> None:
    op.execute(ddl("0001_tasks.down"))
