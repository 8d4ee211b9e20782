"""The claim reads only the rows of the types it may take (one type's backlog no longer slows
the others' claims)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0023_claim_by_type"))


def downgrade() -> None:
    op.execute(ddl("0023_claim_by_type.down"))
