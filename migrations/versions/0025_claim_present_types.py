"""A claim for many types looks only at the types that have rows in the queue (one index
probe per type present, not two per type the worker runs)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0025_claim_present_types"))


def downgrade() -> None:
    op.execute(ddl("0025_claim_present_types.down"))
