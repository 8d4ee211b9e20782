"""The statements of ``sql/queries/progress.sql``."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    _async_cursor,
    _sync_cursor,
)
from taskq.model import ClaimedTask


async def set_progress(
    conn: psycopg.AsyncConnection[Any], *, task_id: int, token: uuid.UUID, progress_json: str
) -> bool:
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("set_progress"), {"id": task_id, "token": token, "progress": progress_json}
        )
        return cur.rowcount == 1


def _checkpoint(task: ClaimedTask, stage: str, data_json: str) -> dict[str, Any]:
    return {"id": task.id, "token": task.effective_id, "stage": stage, "data": data_json}


def save_checkpoint(
    conn: psycopg.Connection[Any], task: ClaimedTask, stage: str, data_json: str
) -> Any:
    """The new context, or None when the attempt's lease was lost."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("save_checkpoint"), _checkpoint(task, stage, data_json))
        row = cur.fetchone()
    return row["context"] if row else None


async def asave_checkpoint(
    conn: psycopg.AsyncConnection[Any], task: ClaimedTask, stage: str, data_json: str
) -> Any:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("save_checkpoint"), _checkpoint(task, stage, data_json))
        row = await cur.fetchone()
    return row["context"] if row else None
