"""Trace ids indexed once, at insert, in taskq.task_traces (not on every status change)"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0020_trace_lookup"))


def downgrade() -> None:
    op.execute(ddl("0020_trace_lookup.down"))
