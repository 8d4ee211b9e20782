"""enqueue_function"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0003_enqueue_function"))


def downgrade() -> None:
    op.execute(ddl("0003_enqueue_function.down"))
