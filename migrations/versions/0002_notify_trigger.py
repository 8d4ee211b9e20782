"""notify_trigger"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0002_notify_trigger"))


def downgrade() -> None:
    op.execute(ddl("0002_notify_trigger.down"))
