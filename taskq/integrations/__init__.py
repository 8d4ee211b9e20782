"""Enqueue through what a service already holds.

``app.enqueue`` takes a psycopg 3 connection or cursor natively. Anything else is recognised
here by the module of its class, without importing any driver: a SQLAlchemy ``Session`` /
``Connection`` (psycopg dialect) is driven synchronously, an ``AsyncSession`` /
``AsyncConnection`` (psycopg or asyncpg dialect) or a raw asyncpg connection asynchronously,
a Django database connection synchronously. Each is reduced to the driver connection that
carries the caller's open transaction: taskq never commits, never opens a connection of its
own, and the wake-up NOTIFY goes out only when the caller commits.
"""

from __future__ import annotations

from typing import Any, Literal

import psycopg

Mode = Literal["sync", "async"]

_KINDS: tuple[tuple[str, str, Mode], ...] = (
    ("sqlalchemy.ext.asyncio.", "sqlalchemy", "async"),
    ("sqlalchemy.", "sqlalchemy", "sync"),
    ("asyncpg.", "asyncpg", "async"),
    ("django.", "django", "sync"),
)


def _kind(conn: object) -> tuple[str, Mode] | None:
    for cls in type(conn).__mro__:
        module = f"{cls.__module__}."
        for prefix, kind, mode in _KINDS:
            if module.startswith(prefix):
                return kind, mode
    return None


def mode_of(conn: object) -> Mode:
    """Whether enqueueing through ``conn`` is a plain call or a coroutine."""
    found = _kind(conn)
    if found is None:
        raise TypeError(
            "enqueue needs a psycopg connection or cursor, a SQLAlchemy session or connection,"
            f" a Django connection or an asyncpg connection; got {type(conn).__name__}"
        )
    return found[1]


def sync_driver(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection inside a SQLAlchemy Session/Connection or a Django connection."""
    found = _kind(conn)
    if found is not None and found[0] == "sqlalchemy":
        from taskq.integrations import sqlalchemy

        return sqlalchemy.sync_driver(conn)
    from taskq.integrations import django

    return django.driver_connection(conn)


async def async_driver(conn: object) -> psycopg.AsyncConnection[Any] | Any:
    """The psycopg AsyncConnection or asyncpg connection inside an AsyncSession /
    AsyncConnection, in its transaction; a raw asyncpg connection as it is."""
    found = _kind(conn)
    if found is not None and found[0] == "sqlalchemy":
        from taskq.integrations import sqlalchemy

        return await sqlalchemy.async_driver(conn)
    return conn
