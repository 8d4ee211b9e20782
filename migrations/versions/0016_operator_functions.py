"""Operator writes through audited definer functions; the audit actor is the login"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0016_operator_functions"))


def downgrade() -> None:
    op.execute(ddl("0016_operator_functions.down"))
