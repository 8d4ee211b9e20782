"""count_outcome"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0010_count_outcome"))


def downgrade() -> None:
    op.execute(ddl("0010_count_outcome.down"))
