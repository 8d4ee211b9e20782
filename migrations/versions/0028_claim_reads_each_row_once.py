"""The claim's UPDATE reads each claimed row once: the old runnable_at comes from the row
itself, not from a second look-up of every picked id"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0028_claim_reads_each_row_once"))


def downgrade() -> None:
    op.execute(ddl("0028_claim_reads_each_row_once.down"))
