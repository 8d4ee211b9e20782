"""breakers.window_from (a fresh failure-rate window) and probed_empty_at (idle HALF_OPEN)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0018_breaker_window"))


def downgrade() -> None:
    op.execute(ddl("0018_breaker_window.down"))
