"""The statements of ``sql/queries/panel.sql``: the dashboard's charts, task browser and workers
page, and the leader's per-minute backlog sample."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import Row, _all

_SAMPLED = ("runnable", "scheduled", "retry_waiting", "processing")


async def sample_backlog(conn: psycopg.AsyncConnection[Any], backlog: Iterable[Row]) -> None:
    """Write this minute's sample from the rows the backlog gauge just read (``backlog``, one
    per queue and type), summed per queue: one read of the live rows serves both. A queue with
    none of the four counts (only dead letters) gets no sample row."""
    per_queue: dict[str, list[int]] = {}
    for row in backlog:
        sums = per_queue.setdefault(row["queue"], [0, 0, 0, 0])
        for i, column in enumerate(_SAMPLED):
            sums[i] += row[column]
    sampled = {queue: sums for queue, sums in per_queue.items() if any(sums)}
    if not sampled:
        return
    params: dict[str, Any] = {"queues": list(sampled)}
    for i, name in enumerate(_SAMPLED):
        params[name] = [sums[i] for sums in sampled.values()]
    await conn.execute(query("sample_backlog"), params)


def prune_backlog_samples(conn: psycopg.Connection[Any], *, older_than_seconds: float) -> None:
    conn.execute(query("prune_backlog_samples"), {"older_than": older_than_seconds})


def chart_outcomes(conn: psycopg.Connection[Any], minutes: int, task_type: str | None) -> list[Row]:
    return _all(conn, "chart_outcomes", {"minutes": minutes, "task_type": task_type})


def chart_backlog(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "chart_backlog", {"minutes": minutes})


def chart_latency(conn: psycopg.Connection[Any], minutes: int, task_type: str | None) -> list[Row]:
    return _all(conn, "chart_latency", {"minutes": minutes, "task_type": task_type})


def chart_retries(conn: psycopg.Connection[Any], minutes: int, task_type: str | None) -> list[Row]:
    return _all(conn, "chart_retries", {"minutes": minutes, "task_type": task_type})


def browse_tasks(conn: psycopg.Connection[Any], filters: Mapping[str, Any]) -> list[Row]:
    return _all(conn, "browse_tasks", filters)


def workers_overview(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "workers_overview")


def report_memory(conn: psycopg.Connection[Any], worker_id: str, rss: int | None) -> None:
    conn.execute(query("report_memory"), {"id": worker_id, "rss": rss})
