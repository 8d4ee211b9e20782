"""Cursors and row helpers shared by the store modules."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import psycopg
from psycopg.rows import dict_row

from taskq.db.connection import first_line, missing_schema, set_config
from taskq.db.sqlfiles import query
from taskq.errors import SchemaMissing

Row = dict[str, Any]

# How the statements a worker repeats on a session of its own are planned: the completer's
# kept connection (``KeptConnection(settings=...)``) and the heartbeat's connection for the
# session; an idempotent handler's transaction and the reaper's pass with ``SET_LOCAL_PLANNER``.
# psycopg prepares a statement after five runs and the session keeps its generic plan until
# the table's statistics change; made while taskq.tasks was empty or small, with sequential
# scans allowed, it was a sequential scan, and it stayed one while the table grew (without
# autovacuum, until taskq's own ANALYZE, sql/ddl/0033). With these, and each of those
# statements finding its rows by an index condition, no plan can read the whole table
# (sql/queries/finish.sql's header). Not through PgBouncer: nothing is prepared there, and a
# session setting would belong to no one in particular.
PLANNER_SETTINGS: Mapping[str, str] = {"enable_seqscan": "off"}

# The same for the current transaction only (SET LOCAL), one statement for all of them.
SET_LOCAL_PLANNER = set_config(PLANNER_SETTINGS, local=True)
SyncTarget = psycopg.Connection[Any] | psycopg.Cursor[Any]
AsyncTarget = psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any]


def _sync_conn(target: SyncTarget) -> psycopg.Connection[Any]:
    """The connection of a connection-or-cursor argument."""
    return target.connection if isinstance(target, psycopg.Cursor) else target


def _async_conn(target: AsyncTarget) -> psycopg.AsyncConnection[Any]:
    return target.connection if isinstance(target, psycopg.AsyncCursor) else target


def _sync_cursor(target: SyncTarget) -> psycopg.Cursor[Row]:
    return _sync_conn(target).cursor(row_factory=dict_row)


def _async_cursor(target: AsyncTarget) -> psycopg.AsyncCursor[Row]:
    return _async_conn(target).cursor(row_factory=dict_row)


def _all(
    conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query(name), params or {})
        return cur.fetchall()


async def _aall(
    conn: psycopg.AsyncConnection[Any], name: str, params: Mapping[str, Any] | None = None
) -> list[Row]:
    async with _async_cursor(conn) as cur:
        await cur.execute(query(name), params or {})
        return await cur.fetchall()


class _SchemaRequired:
    """A plain class, not ``contextlib.contextmanager``: every enqueue enters one, and a
    generator-based context manager costs a generator and three calls each time."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, psycopg.Error) and missing_schema(exc):
            raise SchemaMissing(first_line(exc)) from None


_SCHEMA_REQUIRED = _SchemaRequired()


def schema_required() -> _SchemaRequired:
    """Turn "relation taskq.tasks does not exist" into ``SchemaMissing`` ("run taskq migrate")
    for callers of the public API, instead of a raw psycopg error."""
    return _SCHEMA_REQUIRED
