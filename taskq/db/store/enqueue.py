"""The statements of ``sql/queries/enqueue.sql``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import positional, query
from taskq.db.store._base import (
    AsyncTarget,
    Row,
    SyncTarget,
    _async_cursor,
    _sync_cursor,
)


def insert_task(target: SyncTarget, params: Mapping[str, Any]) -> int | None:
    """The new id, or None when a live task holds the same unique key."""
    with _sync_cursor(target) as cur:
        cur.execute(query("insert_task"), params)
        row = cur.fetchone()
    return int(row["id"]) if row else None


async def ainsert_task(target: AsyncTarget | Any, params: Mapping[str, Any]) -> int | None:
    """Also takes an asyncpg connection (the asyncpg integration)."""
    if not _is_psycopg(target):
        found = await _asyncpg_rows(target, "insert_task", params)
        return int(found[0]["id"]) if found else None
    async with _async_cursor(target) as cur:
        await cur.execute(query("insert_task"), params)
        row = await cur.fetchone()
    return int(row["id"]) if row else None


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


def _copy_row(task_id: int, p: Mapping[str, Any], now: dt.datetime) -> tuple[Any, ...]:
    scheduled = p["scheduled_at"] or now
    if p["delay"]:
        scheduled = scheduled + dt.timedelta(seconds=p["delay"])
    return (
        task_id, p["task_type"], p["queue"], p["biz_id"], p["payload"], p["priority"], scheduled,
        p["max_retry_count"], p["timeout_seconds"], p["trace_id"], p["ordering_key"],
        p["parent_id"], p["concurrency_key"], p["traceparent"],
    )  # fmt: skip


def copy_tasks(target: SyncTarget, items: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """COPY the items (none may have a unique key); their ids in order, or None when this role
    may not set ids (then use insert_tasks). Scheduled times use the database clock."""
    with _sync_cursor(target) as cur:
        cur.execute(query("reserve_task_ids"), {"n": len(items)})
        row = cur.fetchone()
        assert row is not None
        if row["ids"] is None:
            return None
        ids: list[int] = row["ids"]
        with cur.copy(query("copy_tasks")) as copy:
            for task_id, p in zip(ids, items, strict=True):
                copy.write_row(_copy_row(task_id, p, row["now"]))
    return ids


async def acopy_tasks(
    target: AsyncTarget | Any, items: Sequence[Mapping[str, Any]]
) -> list[int] | None:
    if not _is_psycopg(target):
        return None  # asyncpg: insert_tasks (COPY's text format is psycopg's here)
    async with _async_cursor(target) as cur:
        await cur.execute(query("reserve_task_ids"), {"n": len(items)})
        row = await cur.fetchone()
        assert row is not None
        if row["ids"] is None:
            return None
        ids: list[int] = row["ids"]
        async with cur.copy(query("copy_tasks")) as copy:
            for task_id, p in zip(ids, items, strict=True):
                await copy.write_row(_copy_row(task_id, p, row["now"]))
    return ids


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
