"""Cursors and row helpers shared by the store modules."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.rows import dict_row

from taskq.db.connection import first_line, missing_schema
from taskq.db.sqlfiles import query
from taskq.errors import SchemaMissing

Row = dict[str, Any]
SyncTarget = psycopg.Connection[Any] | psycopg.Cursor[Any]
AsyncTarget = psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any]


class Ids(list[int]):
    """Task ids for a ``%(ids)s::bigint[]`` parameter, dumped as one array literal.

    psycopg dumps a plain list element by element in Python (a dumper call and a quoting regex
    each): for the ids and tokens of a 100-task completion that was ~0.6 ms, a tenth of the
    worker's CPU per task in a drain. Ints and UUIDs never need quoting, so one join does."""


class Tokens(list[uuid.UUID]):
    """Attempt tokens (effective_id) for a ``%(tokens)s::uuid[]`` parameter; see ``Ids``."""


class _IdsDumper(Dumper):
    oid = psycopg.postgres.types["int8"].array_oid

    def dump(self, obj: Ids) -> bytes:
        return ("{" + ",".join(map(str, obj)) + "}").encode()


class _TokensDumper(Dumper):
    oid = psycopg.postgres.types["uuid"].array_oid

    def dump(self, obj: Tokens) -> bytes:
        return ("{" + ",".join([token.hex for token in obj]) + "}").encode()


# Global: every connection made after this import knows them (the store is imported first).
psycopg.adapters.register_dumper(Ids, _IdsDumper)
psycopg.adapters.register_dumper(Tokens, _TokensDumper)


def _sync_cursor(target: SyncTarget) -> psycopg.Cursor[Row]:
    conn = target.connection if isinstance(target, psycopg.Cursor) else target
    return conn.cursor(row_factory=dict_row)


def _async_cursor(target: AsyncTarget) -> psycopg.AsyncCursor[Row]:
    conn = target.connection if isinstance(target, psycopg.AsyncCursor) else target
    return conn.cursor(row_factory=dict_row)


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


@contextlib.contextmanager
def schema_required() -> Iterator[None]:
    """Turn "relation taskq.tasks does not exist" into ``SchemaMissing`` ("run taskq migrate")
    for callers of the public API, instead of a raw psycopg error."""
    try:
        yield
    except psycopg.Error as exc:
        if missing_schema(exc):
            raise SchemaMissing(first_line(exc)) from None
        raise
