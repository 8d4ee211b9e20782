"""The statements of ``sql/queries/panel.sql``: the dashboard's charts, task browser and workers
page, and the leader's per-minute backlog sample."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import Row, _all


async def sample_backlog(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(query("sample_backlog"))


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
