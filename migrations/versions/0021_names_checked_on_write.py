"""Task type and queue names checked when written (a trigger), not on every UPDATE (a CHECK)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0021_names_checked_on_write"))


def downgrade() -> None:
    op.execute(ddl("0021_names_checked_on_write.down"))
