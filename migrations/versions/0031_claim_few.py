"""A claim after a short round locks the few runnable rows in one scan and claims them
(taskq.claim_few_v1), falling back to taskq.claim_batch_v3 when there are more, or limits"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0031_claim_few"))


def downgrade() -> None:
    op.execute(ddl("0031_claim_few.down"))
