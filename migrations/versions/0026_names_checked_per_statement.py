"""The name rules on INSERT run once per statement over its new rows, not in a BEFORE INSERT
row trigger's WHEN, which PostgreSQL compiled again for every statement"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0026_names_checked_per_statement"))


def downgrade() -> None:
    op.execute(ddl("0026_names_checked_per_statement.down"))
