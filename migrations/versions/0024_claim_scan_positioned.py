"""The by-type lane scan starts at each due type's first entry (steps once, not twice, over
the entries claimed rows leave at the front of a type's range)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0024_claim_scan_positioned"))


def downgrade() -> None:
    op.execute(ddl("0024_claim_scan_positioned.down"))
