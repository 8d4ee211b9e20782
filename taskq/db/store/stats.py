"""The statements of ``sql/queries/stats.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _aall,
    _all,
    _sync_cursor,
)


def counts_by_status(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("counts_by_status"))
        return cur.fetchall()


def backlog(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "backlog")


async def abacklog(conn: psycopg.AsyncConnection[Any]) -> list[Row]:
    return await _aall(conn, "backlog")


def window_outcomes(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_outcomes", {"minutes": minutes})


def window_latencies(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_latencies", {"minutes": minutes})


def window_retries(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_retries", {"minutes": minutes})


def dlq_growth(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "dlq_growth", {"minutes": minutes})


def capacity(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "capacity")


def workers_not_claiming(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "workers_not_claiming")


def mean_run_seconds(
    conn: psycopg.Connection[Any], *, window_seconds: float, task_type: str | None
) -> list[Row]:
    return _all(conn, "mean_run_seconds", {"seconds": window_seconds, "task_type": task_type})


def db_health(conn: psycopg.Connection[Any]) -> Row | None:
    found = _all(conn, "db_health")
    return found[0] if found else None


async def adb_health(conn: psycopg.AsyncConnection[Any]) -> Row | None:
    found = await _aall(conn, "db_health")
    return found[0] if found else None


def replication(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "replication")


def in_recovery(conn: psycopg.Connection[Any]) -> bool:
    return bool(_all(conn, "in_recovery")[0]["in_recovery"])


def blocked_ordering_keys(
    conn: psycopg.Connection[Any], *, min_wait_seconds: float = 60.0, limit: int = 20
) -> list[Row]:
    """Ordering keys whose head task holds followers back (see stats.sql)."""
    return _all(
        conn, "blocked_ordering_keys", {"min_wait_seconds": min_wait_seconds, "limit": limit}
    )
