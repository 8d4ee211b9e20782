"""The statements of ``sql/queries/prune.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import _aall, _all


def prune_batch(
    conn: psycopg.Connection[Any],
    *,
    dead_letters: bool,
    older_than_seconds: float,
    batch: int,
    cancelled: bool = False,
) -> int:
    """One batch of SUCCESS rows (or CANCELLED ones, or dead letters): how many went."""
    if cancelled:
        name = "prune_cancelled_batch"
    else:
        name = "prune_dead_letter_batch" if dead_letters else "prune_success_batch"
    found = _all(conn, name, {"older_than": older_than_seconds, "batch": batch})
    return int(found[0]["deleted"])


def prune_stats(conn: psycopg.Connection[Any], *, older_than_seconds: float) -> None:
    conn.execute(query("prune_stats"), {"older_than": older_than_seconds})


async def analyze_when_stale(conn: psycopg.AsyncConnection[Any]) -> bool:
    """ANALYZE taskq.tasks if autovacuum does not cover it and its size moved by half from the
    planner's count (0033), so that every session's prepared plans are made again for the
    table as it now is; whether it ran."""
    rows = await _aall(conn, "analyze_when_stale")
    return bool(rows[0]["analyzed"])
