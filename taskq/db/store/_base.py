"""Cursors and row helpers shared by the store modules."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import psycopg
from psycopg.rows import dict_row

from taskq.db.connection import first_line, missing_schema
from taskq.db.sqlfiles import query
from taskq.errors import SchemaMissing

Row = dict[str, Any]
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
