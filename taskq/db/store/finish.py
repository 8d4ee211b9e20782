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
    SET_LOCAL_PLANNER,
    Row,
    _async_cursor,
    _sync_cursor,
)
from taskq.db.store.arrays import BigintArray, BoolArray, Float8Array, TextArray, UuidArray
from taskq.errors import LeaseLost
from taskq.model import ClaimedTask, Finished, Status
from taskq.settings import CRASH_LIMIT


def _rounds(ids: Sequence[int], *columns: Sequence[Any]) -> list[list[list[Any]]]:
    """The batch as finish.sql reads it: sorted by id and each id once per statement (a row's
    entry is found by binary search over the ids), as [ids, *columns] per statement.

    Almost always one statement. An id twice in one flush (an attempt taken away and the row's
    next attempt on this worker, both ended before the flush) puts the second in a statement of
    its own: the row matches the entry with its current token, in whichever statement."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    if len(set(ids)) == len(ids):
        rounds = [order]
    else:
        rounds = []
        previous, repeat = None, 0
        for i in order:
            repeat = repeat + 1 if ids[i] == previous else 0
            previous = ids[i]
            if repeat == len(rounds):
                rounds.append([])
            rounds[repeat].append(i)
    return [[[column[i] for i in positions] for column in (ids, *columns)] for positions in rounds]


def _success_params(ids: list[int], tokens: list[uuid.UUID], outcome: str) -> dict[str, Any]:
    return {"ids": BigintArray(ids), "tokens": UuidArray(tokens), "outcome": outcome}


async def mark_success_many(
    conn: psycopg.AsyncConnection[Any],
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    *,
    outcome: str = "success",
) -> set[int]:
    won: set[int] = set()
    # Tuple rows in binary format: the ids come back as integers, no dict or text per row.
    async with conn.cursor(row_factory=tuple_row) as cur:
        for round_ids, round_tokens in _rounds(ids, tokens):
            await cur.execute(
                query("mark_success_many"),
                _success_params(round_ids, round_tokens, outcome),
                binary=True,
            )
            won.update(r[0] for r in await cur.fetchall())
    return won


async def amark_success_in_transaction(
    conn: psycopg.AsyncConnection[Any], task_id: int, token: uuid.UUID, *, outcome: str
) -> bool:
    """The idempotent path: the same statement for one attempt, inside the handler's open
    transaction (the business writes, the task_executed row and SUCCESS commit together), planned
    with ``PLANNER_SETTINGS`` for this transaction only; one round trip for both."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        async with conn.pipeline():
            await conn.execute(SET_LOCAL_PLANNER)
            await cur.execute(
                query("mark_success_many"),
                _success_params([task_id], [token], outcome),
                binary=True,
            )
        return any(r[0] == task_id for r in await cur.fetchall())


def mark_success_in_transaction(
    conn: psycopg.Connection[Any], task_id: int, token: uuid.UUID, *, outcome: str
) -> bool:
    """``amark_success_in_transaction`` from a sync handler's thread."""
    with conn.cursor(row_factory=tuple_row) as cur:
        with conn.pipeline():
            conn.execute(SET_LOCAL_PLANNER)
            cur.execute(
                query("mark_success_many"),
                _success_params([task_id], [token], outcome),
                binary=True,
            )
        return any(r[0] == task_id for r in cur.fetchall())


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
    finished: dict[int, Finished] = {}
    rounds = _rounds(
        ids, tokens, errors, after_seconds, delay_seconds, jitter_seconds, counts_for_breaker
    )
    async with _async_cursor(conn) as cur:
        for i, t, e, after, delay, jitter, counts in rounds:
            await cur.execute(
                query("mark_failed_many"),
                {
                    "ids": BigintArray(i),
                    "tokens": UuidArray(t),
                    "errors": TextArray(e),
                    "afters": Float8Array(after),
                    "delays": Float8Array(delay),
                    "jitters": Float8Array(jitter),
                    "counts": BoolArray(counts),
                    "threshold": breaker_threshold,
                },
            )
            finished.update(_finished(await cur.fetchall()))
    return finished


async def mark_dead_many(
    conn: psycopg.AsyncConnection[Any],
    *,
    ids: Sequence[int],
    tokens: Sequence[uuid.UUID],
    errors: Sequence[str],
) -> dict[int, Finished]:
    finished: dict[int, Finished] = {}
    async with _async_cursor(conn) as cur:
        for i, t, e in _rounds(ids, tokens, errors):
            await cur.execute(
                query("mark_dead_many"),
                {"ids": BigintArray(i), "tokens": UuidArray(t), "errors": TextArray(e)},
            )
            finished.update(_finished(await cur.fetchall()))
    return finished


async def mark_cancelled_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> dict[int, Finished]:
    """PROCESSING -> CANCELLED for a batch of attempts that were asked to abort."""
    finished: dict[int, Finished] = {}
    async with _async_cursor(conn) as cur:
        for i, t in _rounds(ids, tokens):
            await cur.execute(
                query("mark_cancelled_many"), {"ids": BigintArray(i), "tokens": UuidArray(t)}
            )
            finished.update(_finished(await cur.fetchall()))
    return finished


async def release_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> list[int]:
    released: list[int] = []
    async with _async_cursor(conn) as cur:
        for i, t in _rounds(ids, tokens):
            await cur.execute(
                query("release_many"), {"ids": BigintArray(i), "tokens": UuidArray(t)}
            )
            released += [int(r["id"]) for r in await cur.fetchall()]
    return released


async def reap_attempts(
    conn: psycopg.AsyncConnection[Any],
    *,
    grace_seconds: float,
    orphan_after_seconds: float,
    crash_limit: int = CRASH_LIMIT,
) -> list[Row]:
    """The reaper's rescue and crash judgement; run inside the reaper's one-pass transaction,
    planned with ``PLANNER_SETTINGS`` for that transaction (a pooled connection: the reaper
    takes whichever is free, and a plan made there on an empty table read the whole table at
    every pass once it grew)."""
    async with _async_cursor(conn) as cur:
        await cur.execute(SET_LOCAL_PLANNER)
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
