"""workers"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0005_workers"))


def downgrade() -> None:
    op.execute(ddl("0005_workers.down"))
