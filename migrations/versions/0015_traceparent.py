"""traceparent"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0015_traceparent"))


def downgrade() -> None:
    op.execute(ddl("0015_traceparent.down"))
