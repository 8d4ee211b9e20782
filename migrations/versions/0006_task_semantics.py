"""task_semantics"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0006_task_semantics"))


def downgrade() -> None:
    op.execute(ddl("0006_task_semantics.down"))
