"""The claim functions run without JIT (their generic plans crossed jit_above_cost)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0019_claim_without_jit"))


def downgrade() -> None:
    op.execute(ddl("0019_claim_without_jit.down"))
