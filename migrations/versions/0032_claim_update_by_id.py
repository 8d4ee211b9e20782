"""The claim's UPDATE finds its rows by id (t.id = ANY(v_picked)), so a plan made on a small
table cannot read the whole table (claim_batch_v3, edited in place)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0032_claim_update_by_id"))


def downgrade() -> None:
    op.execute(ddl("0032_claim_update_by_id.down"))
