"""The statements of ``sql/queries/claim.sql``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import Format
from psycopg.rows import tuple_row
from psycopg.types.json import JsonbLoader

from taskq.db.sqlfiles import query
from taskq.db.store.arrays import BigintArray, TextArray
from taskq.model import Claimed, ClaimedTask, TaskOptions

_RAW_DECODE = json.JSONDecoder().raw_decode


class _PayloadLoader(JsonbLoader):
    """jsonb as ``json.loads`` reads it, without its per-call work for bytes (encoding
    detection) and its two whitespace regexes around the value: PostgreSQL's jsonb output is
    UTF-8 text, never with a BOM, and no blank before or after the value. Claims only, which
    are read in binary format (integers, timestamps and UUIDs without parsing text): a
    version byte (1), then that text."""

    format = Format.BINARY

    def load(self, data: Any) -> Any:
        if data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format: {data[0]}")
        return _RAW_DECODE(bytes(data[1:]).decode())[0]


def claim_cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[tuple[Any, ...]]:
    """A cursor for ``claim_batch`` on ``conn``: tuple rows, the claim's payload loader.

    A claimer keeps one for its kept connection (``claim_batch(cursor=...)``): psycopg keeps a
    cursor's adapters, and its Transformer with the dumpers and loaders it looked up, from one
    execute of the same query to the next. A cursor per claim built all of that again, and at
    idle (each claim on caches gone cold) that was ~0.1 ms of the dispatch."""
    cur = conn.cursor(row_factory=tuple_row)
    cur.adapters.register_loader("jsonb", _PayloadLoader)
    return cur


async def claim_batch(
    conn: psycopg.AsyncConnection[Any],
    *,
    queue: str,
    handlers: Sequence[TaskOptions],
    limit: int,
    worker_id: str,
    retries_only: bool = False,
    probe: bool = False,
    isolated: bool = False,
    few: bool = False,
    cursor: psycopg.AsyncCursor[tuple[Any, ...]] | None = None,
) -> Claimed:
    """Claim for the task types in ``handlers``; their settings fill rows that left
    max_retry_count / timeout_seconds NULL. ``.held_for`` on the result: seconds until a
    rate-limited type with due work gets its next token. ``isolated``: at most one row, and
    only one marked isolate (the isolator's claim); else never one marked isolate.
    ``few``: the caller expects fewer runnable rows than ``limit`` (its last claim came back
    short): the same claim, through ``claim_few`` (one scan when they do fit). ``cursor``:
    one from ``claim_cursor(conn)``, kept by the caller; else one for this claim."""
    # Plain tuple rows, built straight into ClaimedTask: the SELECT lists its fields in order
    # (tests/unit checks), then held_for; one dict per claimed row was wasted work.
    cur = claim_cursor(conn) if cursor is None else cursor
    try:
        await cur.execute(
            query("claim_few" if few else "claim_batch"),
            {
                "queue": queue,
                "task_types": TextArray(h.task_type for h in handlers),
                "max_retry_counts": BigintArray(h.max_retry_count for h in handlers),
                "timeouts": BigintArray(h.timeout_seconds for h in handlers),
                "limit": limit,
                "worker_id": worker_id,
                "retries_only": retries_only,
                "probe": probe,
                "isolated": isolated,
            },
            binary=True,
        )
        rows = await cur.fetchall()
    finally:
        if cursor is None:
            await cur.close()
    tasks = Claimed(ClaimedTask(*row[:-1]) for row in rows if row[0] is not None)
    for row in rows:
        if row[0] is None:
            tasks.held_for = float(row[-1])
    # Rows come back in no useful order; start them in claim order (priority, then age).
    tasks.sort(key=lambda t: (-t.priority, t.scheduled_at, t.id))
    return tasks


async def isolated_due(
    conn: psycopg.AsyncConnection[Any], *, queues: Sequence[str], task_types: Sequence[str]
) -> list[str]:
    """The queues among ``queues`` with an isolate row of these types runnable now."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(
            query("isolated_due"), {"queues": list(queues), "task_types": list(task_types)}
        )
        return sorted(str(row[0]) for row in await cur.fetchall())


async def limits_declare(
    conn: psycopg.AsyncConnection[Any], handlers: Sequence[TaskOptions], *, worker_id: str
) -> None:
    """Write the limits the code declares; drop code-declared rows of types that have none."""
    limited = [h for h in handlers if h.limits is not None and h.limits.any]
    unlimited = [h.task_type for h in handlers if h.limits is None or not h.limits.any]
    async with conn.transaction():
        if limited:
            await conn.execute(
                query("limits_declare"),
                {
                    "worker_id": worker_id,
                    "task_types": [h.task_type for h in limited],
                    "max_running": [h.limits.max_running for h in limited if h.limits],
                    "per_key": [h.limits.max_running_per_key for h in limited if h.limits],
                    "rates": [h.limits.rate_per_second for h in limited if h.limits],
                    "rate_texts": [h.limits.rate for h in limited if h.limits],
                    "bursts": [h.limits.effective_burst for h in limited if h.limits],
                    "fair": [h.limits.fair for h in limited if h.limits],
                },
            )
        if unlimited:
            await conn.execute(query("limits_undeclare"), {"task_types": unlimited})
