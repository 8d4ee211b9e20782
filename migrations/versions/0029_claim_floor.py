"""A one-type claim starts where the session's last full claim of the lane ended, not at the
front of the range, where claimed rows leave dead index entries until VACUUM"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0029_claim_floor"))


def downgrade() -> None:
    op.execute(ddl("0029_claim_floor.down"))
