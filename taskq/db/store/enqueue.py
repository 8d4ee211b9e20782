"""The statements of ``sql/queries/enqueue.sql``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from taskq.db.sqlfiles import positional, query
from taskq.db.store._base import (
    AsyncTarget,
    Row,
    SyncTarget,
    _async_conn,
    _async_cursor,
    _sync_conn,
    _sync_cursor,
)
from taskq.errors import InvalidTask


def insert_task(target: SyncTarget, params: Mapping[str, Any]) -> int | None:
    """The new id, or None when a live task holds the same unique key. (A tuple row: one
    column, no dict of names to build per enqueue.)"""
    with _sync_conn(target).cursor(row_factory=tuple_row) as cur:
        cur.execute(query("insert_task"), params)
        row = cur.fetchone()
    return int(row[0]) if row else None


async def ainsert_task(target: AsyncTarget | Any, params: Mapping[str, Any]) -> int | None:
    """Also takes an asyncpg connection (the asyncpg integration)."""
    if not _is_psycopg(target):
        found = await _asyncpg_rows(target, "insert_task", params)
        return int(found[0]["id"]) if found else None
    async with _async_conn(target).cursor(row_factory=tuple_row) as cur:
        await cur.execute(query("insert_task"), params)
        row = await cur.fetchone()
    return int(row[0]) if row else None


def insert_tasks(target: SyncTarget, params: Mapping[str, Any]) -> list[Row]:
    """Rows (id, task_type, unique_key) of the tasks inserted, in item order."""
    if not params["task_types"]:
        return []
    with _sync_cursor(target) as cur:
        cur.execute(query("insert_tasks"), params)
        return cur.fetchall()


async def ainsert_tasks(target: AsyncTarget | Any, params: Mapping[str, Any]) -> list[Row]:
    if not params["task_types"]:
        return []
    if not _is_psycopg(target):
        return await _asyncpg_rows(target, "insert_tasks", params)
    async with _async_cursor(target) as cur:
        await cur.execute(query("insert_tasks"), params)
        return await cur.fetchall()


# The columns every COPY row carries; the optional ones go in only when an item of the batch
# sets them. A column left out takes its default, so a batch of plain items sends (and the server
# parses) 8 fields a row instead of 14. scheduled_at's default, now(), is the transaction's clock:
# the same instant reserve_task_ids reads, so leaving it out changes nothing.
_COPY_COLUMNS = (
    "id", "task_type", "queue", "payload", "priority", "max_retry_count", "timeout_seconds",
    "trace_id",
)  # fmt: skip
_COPY_OPTIONAL = ("biz_id", "ordering_key", "parent_id", "concurrency_key", "traceparent")


def copy_statement(optional: Sequence[str]) -> sql.Composed:
    """copy_tasks for the always-sent columns plus ``optional`` (column names, trusted)."""
    columns = [*_COPY_COLUMNS, *optional]
    return sql.SQL(query("copy_tasks")).format(
        columns=sql.SQL(", ").join(map(sql.Identifier, columns))
    )


def _copy_plan(
    items: Sequence[Mapping[str, Any]], now: dt.datetime
) -> tuple[sql.Composed, Callable[[int, Mapping[str, Any]], tuple[Any, ...]]]:
    """The COPY statement for this batch and the function that makes an item's row for it."""
    optional = [c for c in _COPY_OPTIONAL if any(p[c] is not None for p in items)]
    scheduled = any(p["scheduled_at"] is not None or p["delay"] for p in items)
    statement = copy_statement([*optional, *(["scheduled_at"] if scheduled else [])])

    def row(task_id: int, p: Mapping[str, Any]) -> tuple[Any, ...]:
        fields = (*_plain_row(task_id, p), *[p[c] for c in optional])
        if not scheduled:
            return fields
        at = p["scheduled_at"] or now
        if p["delay"]:
            at = at + dt.timedelta(seconds=p["delay"])
        return (*fields, at)

    return statement, row


def _reserved(row: Row | None) -> tuple[list[int], dt.datetime] | None:
    """reserve_task_ids' answer: the ids and the database clock, or None when this role may
    not set ids."""
    assert row is not None
    if row["ids"] is None:
        return None
    return list(row["ids"]), row["now"]


def copy_tasks(target: SyncTarget, items: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """COPY the items (none may have a unique key); their ids in order, or None when this role
    may not set ids (then use insert_tasks). Scheduled times use the database clock."""
    with _sync_cursor(target) as cur:
        reserved = _reserved(cur.execute(query("reserve_task_ids"), {"n": len(items)}).fetchone())
        if reserved is None:
            return None
        ids, now = reserved
        statement, make_row = _copy_plan(items, now)
        with cur.copy(statement) as copy:
            for task_id, p in zip(ids, items, strict=True):
                copy.write_row(make_row(task_id, p))
    return ids


async def acopy_tasks(
    target: AsyncTarget | Any, items: Sequence[Mapping[str, Any]]
) -> list[int] | None:
    if not _is_psycopg(target):
        return None  # asyncpg: insert_tasks (COPY's text format is psycopg's here)
    async with _async_cursor(target) as cur:
        await cur.execute(query("reserve_task_ids"), {"n": len(items)})
        reserved = _reserved(await cur.fetchone())
        if reserved is None:
            return None
        ids, now = reserved
        statement, make_row = _copy_plan(items, now)
        async with cur.copy(statement) as copy:
            for task_id, p in zip(ids, items, strict=True):
                await copy.write_row(make_row(task_id, p))
    return ids


def copy_plain_tasks(
    target: SyncTarget, count: int, items: Iterable[Mapping[str, Any]]
) -> list[int] | None:
    """COPY ``count`` plain items (task type and payload only: the always-sent columns), made
    *while they stream*: the caller's iterator checks each item as the row before it is on its
    way, so checking and the server's inserting overlap. An item that fails its check
    (InvalidTask) rolls back to a savepoint taken before the COPY: nothing is written and the
    caller's transaction goes on as if the call had not been made, as when every item was
    checked first. None when this role may not set ids (nothing was read from ``items``)."""
    conn = target.connection if isinstance(target, psycopg.Cursor) else target
    with _sync_cursor(target) as cur:
        reserved = _reserved(cur.execute(query("reserve_task_ids"), {"n": count}).fetchone())
        if reserved is None:
            return None
        ids = reserved[0]
        guarded = not conn.autocommit  # autocommit: the COPY is its own transaction
        if guarded:
            cur.execute(query("enqueue_savepoint"))
        try:
            with cur.copy(copy_statement(())) as copy:
                for task_id, p in zip(ids, items, strict=True):
                    copy.write_row(_plain_row(task_id, p))
        except InvalidTask:
            if guarded:
                cur.execute(query("enqueue_savepoint_rollback"))
            raise
        if guarded:
            cur.execute(query("enqueue_savepoint_release"))
    return ids


async def acopy_plain_tasks(
    target: AsyncTarget, count: int, items: Iterable[Mapping[str, Any]]
) -> list[int] | None:
    conn = target.connection if isinstance(target, psycopg.AsyncCursor) else target
    async with _async_cursor(target) as cur:
        await cur.execute(query("reserve_task_ids"), {"n": count})
        reserved = _reserved(await cur.fetchone())
        if reserved is None:
            return None
        ids = reserved[0]
        guarded = not conn.autocommit
        if guarded:
            await cur.execute(query("enqueue_savepoint"))
        try:
            async with cur.copy(copy_statement(())) as copy:
                for task_id, p in zip(ids, items, strict=True):
                    await copy.write_row(_plain_row(task_id, p))
        except InvalidTask:
            if guarded:
                await cur.execute(query("enqueue_savepoint_rollback"))
            raise
        if guarded:
            await cur.execute(query("enqueue_savepoint_release"))
    return ids


def _plain_row(task_id: int, p: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        task_id, p["task_type"], p["queue"], p["payload"], p["priority"],
        p["max_retry_count"], p["timeout_seconds"], p["trace_id"],
    )  # fmt: skip


def _key_params(keys: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    return {"task_types": [k[0] for k in keys], "unique_keys": [k[1] for k in keys]}


def find_live_tasks(
    target: SyncTarget, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The live task holding each (task_type, unique_key), where there is one."""
    with _sync_cursor(target) as cur:
        cur.execute(query("find_live_tasks"), _key_params(keys))
        return {(r["task_type"], r["unique_key"]): int(r["id"]) for r in cur.fetchall()}


async def afind_live_tasks(
    target: AsyncTarget | Any, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    if not _is_psycopg(target):
        found = await _asyncpg_rows(target, "find_live_tasks", _key_params(keys))
        return {(r["task_type"], r["unique_key"]): int(r["id"]) for r in found}
    async with _async_cursor(target) as cur:
        await cur.execute(query("find_live_tasks"), _key_params(keys))
        return {(r["task_type"], r["unique_key"]): int(r["id"]) for r in await cur.fetchall()}


def _is_psycopg(target: object) -> bool:
    return isinstance(target, psycopg.AsyncConnection | psycopg.AsyncCursor)


async def _asyncpg_rows(conn: Any, name: str, params: Mapping[str, Any]) -> list[Row]:
    """Run a named query on an asyncpg connection, in whatever transaction it has open.
    asyncpg takes ``$n`` placeholders, so the statement is the same text renumbered."""
    text, names = positional(name)
    records = await conn.fetch(text, *(params[n] for n in names))
    return [dict(r) for r in records]
