"""The statements of ``sql/queries/limits.sql``: the operator's view and changes of flow
limits (changes go through SECURITY DEFINER functions that write the audit row)."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.store._base import Row, _aall, _all


def limits_list(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "limits_list")


async def alimits_list(conn: psycopg.AsyncConnection[Any]) -> list[Row]:
    return await _aall(conn, "limits_list")


def queue_limits_list(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "queue_limits_list")


def limits_set(
    conn: psycopg.Connection[Any],
    *,
    task_type: str,
    actor: str,
    max_running: int | None = None,
    max_running_per_key: int | None = None,
    rate: float | None = None,
    rate_text: str | None = None,
    burst: float | None = None,
    fair: bool | None = None,
    clear: list[str] | None = None,
    note: str | None = None,
) -> Row:
    found = _all(
        conn,
        "limits_set",
        {
            "task_type": task_type,
            "actor": actor,
            "max_running": max_running,
            "max_running_per_key": max_running_per_key,
            "rate": rate,
            "rate_text": rate_text,
            "burst": burst,
            "fair": fair,
            "clear": clear or [],
            "note": note,
        },
    )
    return found[0]


def limits_reset(
    conn: psycopg.Connection[Any], *, task_type: str, actor: str, note: str | None
) -> bool:
    found = _all(conn, "limits_reset", {"task_type": task_type, "actor": actor, "note": note})
    return bool(found[0]["removed"])


def queue_limits_set(
    conn: psycopg.Connection[Any], *, queue: str, retry_share: float, actor: str, note: str | None
) -> float:
    found = _all(
        conn,
        "queue_limits_set",
        {"queue": queue, "retry_share": retry_share, "actor": actor, "note": note},
    )
    return float(found[0]["retry_share"])
