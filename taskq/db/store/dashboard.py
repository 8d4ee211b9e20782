"""The statements of ``sql/queries/dashboard.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.store._base import (
    Row,
    _all,
)
from taskq.errors import InvalidTask


def dlq_requeue_edited(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    payload_json: str,
    reset: bool,
    actor: str,
    note: str | None,
) -> bool:
    """False when the task is not (or no longer) a dead letter: nothing changed."""
    params = {
        "id": task_id,
        "payload": payload_json,
        "reset": reset,
        "actor": actor,
        "note": note,
    }
    try:
        return bool(_all(conn, "dlq_requeue_edited", params))
    except psycopg.errors.UniqueViolation as exc:
        detail = exc.diag.message_detail or ""
        raise InvalidTask(
            f"cannot requeue, nothing changed: a live task holds the same unique key. {detail}"
        ) from None
    except psycopg.DataError as exc:  # SQLSTATE class 22, e.g. a \u0000 that jsonb cannot hold
        raise InvalidTask(
            f"the payload was refused, nothing changed: {exc.diag.message_primary}"
        ) from None


def audit_list(
    conn: psycopg.Connection[Any],
    *,
    action: str | None,
    task_id: int | None,
    task_type: str | None,
    limit: int,
) -> list[Row]:
    params = {"action": action, "task_id": task_id, "task_type": task_type, "limit": limit}
    return _all(conn, "audit_list", params)
