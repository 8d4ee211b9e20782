"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
"""

from alembic import op

from taskq.sqlfiles import ddl

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(ddl("${up_revision}_SLUG"))


def downgrade() -> None:
    op.execute(ddl("${up_revision}_SLUG.down"))
