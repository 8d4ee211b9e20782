"""The statements of ``sql/queries/schedules.sql``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _sync_cursor,
)


def schedule_upsert(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> Row:
    with _sync_cursor(conn) as cur:
        cur.execute(query("schedule_upsert"), params)
        row = cur.fetchone()
    assert row is not None
    return row


def schedule_tick(
    conn: psycopg.Connection[Any],
    *,
    name: str,
    tick: Any,
    outcome: str,
    task_id: int | None,
    reason: str | None,
) -> bool:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("schedule_tick"),
            {"name": name, "tick": tick, "outcome": outcome, "task_id": task_id, "reason": reason},
        )
        return cur.fetchone() is not None


def schedule_advance(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> None:
    conn.execute(query("schedule_advance"), params)


def list_schedules(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("list_schedules"))
        return cur.fetchall()


def schedule_tick_task(
    conn: psycopg.Connection[Any], *, name: str, tick: Any, task_id: int
) -> None:
    conn.execute(query("schedule_tick_task"), {"name": name, "tick": tick, "task_id": task_id})
