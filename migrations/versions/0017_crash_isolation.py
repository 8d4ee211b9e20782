"""crash isolation: crash_count, isolate, claim_batch_v3"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0017_crash_isolation"))


def downgrade() -> None:
    op.execute(ddl("0017_crash_isolation.down"))
