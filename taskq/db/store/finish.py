"""The statements of ``sql/queries/finish.sql``: every move of a row out of PROCESSING.

Called from ``taskq.worker.completer`` only (``tests/unit`` checks): one writer per transition.
Batched functions take parallel sequences and run one statement, whatever the batch size.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _async_cursor,
    _sync_cursor,
)
from taskq.db.store.arrays import BigintArray, BoolArray, Float8Array, TextArray, UuidArray
from taskq.errors import LeaseLost
from taskq.model import ClaimedTask, Finished, Status
from taskq.settings import CRASH_LIMIT


def _success_params(
    ids: Sequence[int], tokens: Sequence[uuid.UUID], outcome: str
) -> dict[str, Any]:
    return {"ids": BigintArray(ids), "tokens": UuidArray(tokens), "outcome": outcome}


async def mark_success_many(
    conn: psycopg.AsyncConnection[Any],
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    *,
    outcome: str = "success",
) -> set[int]:
    # Tuple rows in binary format: the ids come back as integers, no dict or text per row.
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(
            query("mark_success_many"), _success_params(ids, tokens, outcome), binary=True
        )
        return {r[0] for r in await cur.fetchall()}


def mark_success_many_sync(
    conn: psycopg.Connection[Any],
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    *,
    outcome: str = "success",
) -> set[int]:
    """The same statement from a sync handler's thread (the idempotent transaction)."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("mark_success_many"), _success_params(ids, tokens, outcome), binary=True)
        return {r[0] for r in cur.fetchall()}


def _finished(rows: list[Row]) -> dict[int, Finished]:
    return {
        int(r["id"]): Finished(Status(r["status"]), int(r["retry_count"]), r["next_retry_time"])
        for r in rows
    }


async def mark_failed_many(
    conn: psycopg.AsyncConnection[Any],
    *,
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    errors: Sequence[str],
    after_seconds: Sequence[float | None],
    delay_seconds: Sequence[float],
    jitter_seconds: Sequence[float],
    counts_for_breaker: Sequence[bool],
    breaker_threshold: int,
) -> dict[int, Finished]:
    """Fail a batch of attempts in one statement; the attempts that matched, with their new
    state (FAILED with its retry time, or DEAD_LETTER once retries are exhausted)."""
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("mark_failed_many"),
            {
                "ids": BigintArray(ids),
                "tokens": UuidArray(tokens),
                "errors": TextArray(errors),
                "afters": Float8Array(after_seconds),
                "delays": Float8Array(delay_seconds),
                "jitters": Float8Array(jitter_seconds),
                "counts": BoolArray(counts_for_breaker),
                "threshold": breaker_threshold,
            },
        )
        return _finished(await cur.fetchall())


async def mark_dead_many(
    conn: psycopg.AsyncConnection[Any],
    *,
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    errors: Sequence[str],
) -> dict[int, Finished]:
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("mark_dead_many"),
            {"ids": BigintArray(ids), "tokens": UuidArray(tokens), "errors": TextArray(errors)},
        )
        return _finished(await cur.fetchall())


async def mark_cancelled_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> dict[int, Finished]:
    """PROCESSING -> CANCELLED for a batch of attempts that were asked to abort."""
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("mark_cancelled_many"), {"ids": BigintArray(ids), "tokens": UuidArray(tokens)}
        )
        return _finished(await cur.fetchall())


async def release_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> list[int]:
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("release_many"), {"ids": BigintArray(ids), "tokens": UuidArray(tokens)}
        )
        return [int(r["id"]) for r in await cur.fetchall()]


async def reap_attempts(
    conn: psycopg.AsyncConnection[Any],
    *,
    grace_seconds: float,
    orphan_after_seconds: float,
    crash_limit: int = CRASH_LIMIT,
) -> list[Row]:
    """The reaper's rescue and crash judgement; run inside the reaper's one-pass transaction."""
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("reap_attempts"),
            {
                "grace": grace_seconds,
                "orphan_after": orphan_after_seconds,
                "crash_limit": crash_limit,
            },
        )
        return await cur.fetchall()


def _key(task: ClaimedTask) -> dict[str, Any]:
    return {"id": task.id, "token": task.effective_id}


def _not_held(task: ClaimedTask) -> LeaseLost:
    return LeaseLost(f"task {task.id}: attempt taken away before its business key was taken")


def record_business_key(conn: psycopg.Connection[Any], task: ClaimedTask) -> bool:
    """Take the task's (task_type, biz_id) in the current transaction; False if it was taken
    already. Only for the attempt this worker holds: LeaseLost (and nothing taken) otherwise."""
    with _sync_cursor(conn) as cur:
        try:
            cur.execute(query("record_business_key"), _key(task))
        except psycopg.errors.ObjectNotInPrerequisiteState:
            raise _not_held(task) from None
        row = cur.fetchone()
        return bool(row and row["taken"])


async def arecord_business_key(conn: psycopg.AsyncConnection[Any], task: ClaimedTask) -> bool:
    async with _async_cursor(conn) as cur:
        try:
            await cur.execute(query("record_business_key"), _key(task))
        except psycopg.errors.ObjectNotInPrerequisiteState:
            raise _not_held(task) from None
        row = await cur.fetchone()
        return bool(row and row["taken"])
