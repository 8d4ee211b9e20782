"""One AFTER INSERT statement trigger checks names, indexes trace ids and sends the NOTIFY:
three trigger calls cost a one-row INSERT 6-12 us more in the server than one"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0027_one_insert_trigger"))


def downgrade() -> None:
    op.execute(ddl("0027_one_insert_trigger.down"))
