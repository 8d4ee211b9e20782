"""Alembic environment for taskq: raw SQL files, no models, one schema.

Online: takes a transaction-level advisory lock first, so `taskq migrate` run from many hosts
at once is safe — the others wait, then find the schema at head and do nothing. Offline
(`taskq migrate --sql`): prints the SQL for a DBA instead of running it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

# A fixed, arbitrary key: "taskq" in ASCII. Only `taskq migrate` takes it.
MIGRATION_LOCK_KEY = 0x7461736B71

config = context.config


def run_offline() -> None:
    context.configure(
        url="postgresql+psycopg://",
        dialect_name="postgresql",
        target_metadata=None,
        literal_binds=True,
        version_table_schema="taskq",
        transaction_per_migration=False,
    )
    print("CREATE SCHEMA IF NOT EXISTS taskq;")
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        dsn = config.get_main_option("taskq.dsn")
        if not dsn:
            raise RuntimeError("no database given to the migration environment")
        import psycopg

        engine = create_engine(
            "postgresql+psycopg://",
            creator=lambda: psycopg.connect(dsn, application_name="taskq-migrate"),
            poolclass=pool.NullPool,
        )
        with engine.connect() as conn:
            _migrate(conn)
        engine.dispose()
    else:
        _migrate(connection)


def _migrate(conn) -> None:  # type: ignore[no-untyped-def]
    # The lock is taken in the same transaction as the migrations and released at commit.
    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    conn.execute(text("CREATE SCHEMA IF NOT EXISTS taskq"))
    context.configure(
        connection=conn,
        target_metadata=None,
        version_table_schema="taskq",
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()
    conn.commit()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
