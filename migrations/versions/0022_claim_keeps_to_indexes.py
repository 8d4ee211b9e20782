"""The claim functions keep to the indexes (a plan made on an empty table seq-scanned for ever)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0022_claim_keeps_to_indexes"))


def downgrade() -> None:
    op.execute(ddl("0022_claim_keeps_to_indexes.down"))
