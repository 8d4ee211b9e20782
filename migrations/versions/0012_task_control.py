"""task control"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0012_task_control"))


def downgrade() -> None:
    op.execute(ddl("0012_task_control.down"))
