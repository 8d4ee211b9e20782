"""schedules"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0007_schedules"))


def downgrade() -> None:
    op.execute(ddl("0007_schedules.down"))
