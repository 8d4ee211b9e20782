"""taskq.analyze_when_stale_v1(): ANALYZE taskq.tasks when autovacuum does not cover it and it
changed enough, so the workers' prepared plans follow the table as it grows"""

from alembic import op

from taskq.db.sqlfiles import ddl

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("0033_analyze_when_stale"))


def downgrade() -> None:
    op.execute(ddl("0033_analyze_when_stale.down"))
