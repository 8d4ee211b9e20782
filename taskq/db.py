"""Where connections come from, and the translation of connection failures.

Every connection taskq opens is tagged with an ``application_name`` (``taskq-<role>-<pid>``),
so an operator (or a fault test) can find it in ``pg_stat_activity``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row

from taskq.errors import DatabaseUnavailable

ConnectionError_ = (psycopg.OperationalError, psycopg.InterfaceError)
"""What a lost or refused connection raises (server restart, terminated backend, network)."""


def application_name(role: str) -> str:
    return f"taskq-{role}-{os.getpid()}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def unavailable(exc: BaseException) -> DatabaseUnavailable:
    return DatabaseUnavailable(f"database unavailable: {first_line(exc)}")


def connect(
    dsn: str, *, role: str = "cli", autocommit: bool = False, **kwargs: Any
) -> psycopg.Connection[dict[str, Any]]:
    """A sync connection with dict rows (the CLI and tests use these). ``kwargs`` go to
    ``psycopg.connect`` (the worker passes ``pooler_kwargs``)."""
    try:
        return psycopg.connect(
            dsn,
            autocommit=autocommit,
            row_factory=dict_row,
            application_name=application_name(role),
            connect_timeout=10,
            **kwargs,
        )
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


def pooler_kwargs(*, pgbouncer: bool) -> dict[str, Any]:
    """Connection arguments for a worker whose connections go through PgBouncer in transaction
    mode (``taskq worker --pgbouncer``).

    psycopg prepares a statement server-side once it has run 5 times (``prepare_threshold``);
    the prepared statement lives in one server session, and under transaction pooling the next
    transaction may get another session: "prepared statement _pg3_0 does not exist" (or
    "already exists"). ``prepare_threshold=None`` never prepares; the cost is planning each
    statement again, small next to a round trip. Everything else taskq runs through such a
    connection is session-free: one statement or one transaction at a time, advisory locks only
    transaction-scoped; LISTEN, the one session-bound thing, has its own direct connection.
    """
    return {"prepare_threshold": None} if pgbouncer else {}


def connect_plain(dsn: str, *, role: str) -> psycopg.Connection[Any]:
    """A sync connection with psycopg's default (tuple) rows, for user code (reconcilers)."""
    try:
        return psycopg.connect(dsn, application_name=application_name(role), connect_timeout=10)
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


async def aconnect(
    dsn: str, *, role: str, autocommit: bool = False, **kwargs: Any
) -> psycopg.AsyncConnection[dict[str, Any]]:
    try:
        return await psycopg.AsyncConnection.connect(
            dsn,
            autocommit=autocommit,
            row_factory=dict_row,
            application_name=application_name(role),
            connect_timeout=10,
            **kwargs,
        )
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


@contextlib.contextmanager
def session(dsn: str, *, role: str = "cli") -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """One short-lived connection; commits on success, rolls back on error."""
    conn = connect(dsn, role=role)
    try:
        with conn:
            yield conn
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


@contextlib.asynccontextmanager
async def asession(
    dsn: str, *, role: str
) -> AsyncIterator[psycopg.AsyncConnection[dict[str, Any]]]:
    conn = await aconnect(dsn, role=role)
    try:
        async with conn:
            yield conn
    except ConnectionError_ as exc:
        raise unavailable(exc) from None
