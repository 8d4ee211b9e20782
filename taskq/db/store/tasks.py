"""The statements of ``sql/queries/tasks.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _aall,
    _sync_cursor,
)


def get_task(conn: psycopg.Connection[Any], task_id: int) -> Row | None:
    with _sync_cursor(conn) as cur:
        cur.execute(query("get_task"), {"id": task_id})
        return cur.fetchone()


def audit_for_task(conn: psycopg.Connection[Any], task_id: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("audit_for_task"), {"id": task_id})
        return cur.fetchall()


def running_tasks(
    conn: psycopg.Connection[Any], *, task_type: str | None = None, limit: int = 100
) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("running_tasks"), {"task_type": task_type, "limit": limit})
        return cur.fetchall()


def task_tree(conn: psycopg.Connection[Any], task_id: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("task_tree"), {"id": task_id})
        return cur.fetchall()


def tasks_without_task(
    conn: psycopg.Connection[Any], task_type: str, biz_ids: Sequence[str]
) -> list[str]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("tasks_without_task"), {"task_type": task_type, "biz_ids": list(biz_ids)})
        return [str(r["biz_id"]) for r in cur.fetchall()]


async def aget_task(conn: psycopg.AsyncConnection[Any], task_id: int) -> Row | None:
    found = await _aall(conn, "get_task", {"id": task_id})
    return found[0] if found else None
