"""SQLAlchemy 2: enqueue in a ``Session``'s (or ``Connection``'s) current transaction.

You do not call this module: pass the session to ``app.enqueue`` (or ``task.enqueue``,
``enqueue_many``)::

    with Session(engine) as session, session.begin():
        session.add(order)
        app.enqueue(session, "send_receipt", {"order": order.id})     # sync, psycopg dialect

    async with AsyncSession(engine) as session, session.begin():
        session.add(order)
        await app.enqueue(session, "send_receipt", {"order": order.id})  # psycopg or asyncpg

The task is written through the session's own connection, in its transaction: a rollback
removes it, the commit wakes a worker. Supported dialects: ``postgresql+psycopg`` (sync and
async) and ``postgresql+asyncpg``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from taskq.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection


def _unsupported(driver: object) -> ConfigError:
    return ConfigError(
        "taskq enqueues through SQLAlchemy's postgresql+psycopg or postgresql+asyncpg dialects;"
        f" this connection's driver is {type(driver).__module__}.{type(driver).__name__}"
    )


def sync_driver(session_or_connection: Any) -> psycopg.Connection[Any]:
    """The psycopg connection of a ``Session`` / ``scoped_session`` / ``Connection``. A
    session's ``connection()`` begins its transaction if none is open: the one the caller
    commits or rolls back."""
    connection: Connection = (
        session_or_connection.connection()
        if hasattr(session_or_connection, "get_bind")
        else session_or_connection
    )
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise _unsupported(driver)
    return driver


async def async_driver(session_or_connection: Any) -> psycopg.AsyncConnection[Any] | Any:
    """The psycopg AsyncConnection or asyncpg connection of an ``AsyncSession`` /
    ``AsyncConnection``, with the session's transaction begun on the server."""
    connection: AsyncConnection = (
        await session_or_connection.connection()
        if hasattr(session_or_connection, "get_bind")
        else session_or_connection
    )
    raw = await connection.get_raw_connection()
    driver: Any = raw.driver_connection
    if isinstance(driver, psycopg.AsyncConnection):
        return driver  # psycopg begins the transaction implicitly on the first statement
    if type(driver).__module__.startswith("asyncpg."):
        # SQLAlchemy's asyncpg adapter sends BEGIN lazily, before its own first statement. If
        # the enqueue is the session's first statement, begin it now, through the adapter, so
        # that the session's commit or rollback is the one that decides the task.
        adapter = raw.dbapi_connection
        if not driver.is_in_transaction() and getattr(adapter, "isolation_level", None) != (
            "autocommit"
        ):
            start = getattr(adapter, "_start_transaction", None)
            if start is None:
                raise ConfigError(
                    "cannot join this AsyncSession's transaction (unknown asyncpg adapter):"
                    " run a statement in the session before enqueueing"
                )
            await start()
        return driver
    raise _unsupported(driver)
