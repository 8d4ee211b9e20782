"""operations"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0008_operations"))


def downgrade() -> None:
    op.execute(ddl("0008_operations.down"))
