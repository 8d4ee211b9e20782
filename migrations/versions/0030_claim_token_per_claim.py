"""A claim draws its tokens' randomness once (one UUID per claim, each token that draw's first
74 random bits and the row's id), instead of calling gen_random_uuid() for every claimed row"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0030_claim_token_per_claim"))


def downgrade() -> None:
    op.execute(ddl("0030_claim_token_per_claim.down"))
