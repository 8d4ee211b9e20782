"""flow control"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0014_flow_control"))


def downgrade() -> None:
    op.execute(ddl("0014_flow_control.down"))
