"""One BEFORE INSERT row trigger without WHEN (routing, name rules, payload size): a WHEN is
compiled on every statement, which made a one-row INSERT pay more for the checks than they cost"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0026_one_insert_trigger"))


def downgrade() -> None:
    op.execute(ddl("0026_one_insert_trigger.down"))
