"""panel"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0011_panel"))


def downgrade() -> None:
    op.execute(ddl("0011_panel.down"))
