"""audit"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0004_audit"))


def downgrade() -> None:
    op.execute(ddl("0004_audit.down"))
