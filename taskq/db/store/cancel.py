"""The statements of ``sql/queries/cancel.sql``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    AsyncTarget,
    Row,
    SyncTarget,
    _all,
    _async_cursor,
    _sync_cursor,
)
from taskq.errors import InvalidTask, TaskNotFound


def _cancel_params(
    ids: Sequence[int], with_children: bool, note: str | None, by: str | None
) -> dict[str, Any]:
    return {"ids": list(ids), "with_children": with_children, "note": note, "by": by}


def _refused(exc: psycopg.Error) -> Exception:
    """SQLSTATE-based: P0002 an unknown id, 55000 a finished task; the message names them."""
    message = exc.diag.message_primary or str(exc)
    if isinstance(exc, psycopg.errors.NoDataFound):
        return TaskNotFound(message)
    return InvalidTask(message)


_REFUSALS = (psycopg.errors.NoDataFound, psycopg.errors.ObjectNotInPrerequisiteState)


def cancel_tasks(
    target: SyncTarget,
    ids: Sequence[int],
    *,
    with_children: bool = False,
    note: str | None = None,
    by: str | None = None,
) -> list[Row]:
    """Cancel (or ask to abort) in the caller's transaction; rows of (task_id, status_from,
    status_to)."""
    with _sync_cursor(target) as cur:
        try:
            cur.execute(query("cancel_tasks"), _cancel_params(ids, with_children, note, by))
        except _REFUSALS as exc:
            raise _refused(exc) from None
        return cur.fetchall()


async def acancel_tasks(
    target: AsyncTarget,
    ids: Sequence[int],
    *,
    with_children: bool = False,
    note: str | None = None,
    by: str | None = None,
) -> list[Row]:
    async with _async_cursor(target) as cur:
        try:
            await cur.execute(query("cancel_tasks"), _cancel_params(ids, with_children, note, by))
        except _REFUSALS as exc:
            raise _refused(exc) from None
        return await cur.fetchall()


def cancel_candidates(
    conn: psycopg.Connection[Any], *, task_type: str | None, biz_id: str | None, limit: int
) -> list[Row]:
    return _all(
        conn, "cancel_candidates", {"task_type": task_type, "biz_id": biz_id, "limit": limit}
    )


def tasks_by_ids(conn: psycopg.Connection[Any], ids: Sequence[int]) -> list[Row]:
    return _all(conn, "tasks_by_ids", {"ids": list(ids)})


def aborts_requested(
    conn: psycopg.Connection[Any], held: Sequence[tuple[int, uuid.UUID]]
) -> list[int]:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("aborts_requested"),
            {"ids": [h[0] for h in held], "tokens": [h[1] for h in held]},
        )
        return [int(r["id"]) for r in cur.fetchall()]
