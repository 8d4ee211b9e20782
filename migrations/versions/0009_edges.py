"""edges"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0009_edges"))


def downgrade() -> None:
    op.execute(ddl("0009_edges.down"))
