"""worker claiming"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0013_worker_claiming"))


def downgrade() -> None:
    op.execute(ddl("0013_worker_claiming.down"))
