"""The statements of ``sql/queries/dlq.sql``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import Row, _all, _sync_cursor
from taskq.errors import InvalidTask, TaskNotFound
from taskq.model import DeadLetterFilter

ALL = DeadLetterFilter()


def dlq_list(
    conn: psycopg.Connection[Any],
    *,
    task_type: str | None = None,
    limit: int,
    where: DeadLetterFilter = ALL,
) -> list[Row]:
    params = where.params()
    if task_type is not None:
        params["task_type"] = task_type
    return _all(conn, "dlq_list", {**params, "limit": limit})


def dlq_select(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int] | None = None,
    task_type: str | None = None,
    where: DeadLetterFilter = ALL,
) -> list[Row]:
    params = where.params()
    if ids is not None:
        params["ids"] = list(ids)
    if task_type is not None:
        params["task_type"] = task_type
    return _all(conn, "dlq_select", params)


def dlq_requeue(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int] | None = None,
    task_type: str | None = None,
    reset: bool,
    actor: str,
    note: str | None,
    where: DeadLetterFilter = ALL,
    batch: int = 1000,
) -> list[int]:
    """At most ``batch`` dead letters of the selection back to PENDING (one statement)."""
    params = where.params()
    if ids is not None:
        params["ids"] = list(ids)
    if task_type is not None:
        params["task_type"] = task_type
    with _sync_cursor(conn) as cur:
        try:
            cur.execute(
                query("dlq_requeue"),
                {**params, "reset": reset, "actor": actor, "note": note, "batch": batch},
            )
        except psycopg.errors.UniqueViolation as exc:
            detail = exc.diag.message_detail or ""
            raise InvalidTask(
                f"cannot requeue, nothing changed: a live task holds the same unique key. {detail}"
            ) from None
        return [int(r["id"]) for r in cur.fetchall()]


def dlq_discard(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int] | None = None,
    task_type: str | None = None,
    actor: str,
    note: str | None,
    where: DeadLetterFilter = ALL,
    batch: int = 1000,
) -> list[int]:
    params = where.params()
    if ids is not None:
        params["ids"] = list(ids)
    if task_type is not None:
        params["task_type"] = task_type
    with _sync_cursor(conn) as cur:
        cur.execute(query("dlq_discard"), {**params, "actor": actor, "note": note, "batch": batch})
        return [int(r["id"]) for r in cur.fetchall()]


def dlq_run_audit(
    conn: psycopg.Connection[Any],
    *,
    action: str,
    actor: str,
    note: str | None,
    detail: dict[str, Any],
) -> None:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("dlq_run_audit"),
            {"action": action, "actor": actor, "note": note, "detail": json.dumps(detail)},
        )


def dlq_handle(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int],
    state: str,
    owner: str | None,
    resolution: str | None,
    note: str | None,
    by: str | None,
) -> list[Row]:
    """Set the handling record of dead letters (all or nothing, audited by the database)."""
    try:
        return _all(
            conn,
            "dlq_handle",
            {
                "ids": list(ids),
                "state": state,
                "owner": owner,
                "resolution": resolution,
                "note": note,
                "by": by,
            },
        )
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise TaskNotFound(exc.diag.message_primary or str(exc)) from None
    except psycopg.errors.InvalidParameterValue as exc:
        raise InvalidTask(exc.diag.message_primary or str(exc)) from None


def dlq_groups(conn: psycopg.Connection[Any], *, where: DeadLetterFilter = ALL) -> list[Row]:
    return _all(conn, "dlq_groups", where.params())


def dlq_report(conn: psycopg.Connection[Any], *, since_seconds: float) -> dict[str, list[Row]]:
    params = {"since": since_seconds}
    return {
        "new": _all(conn, "dlq_report_new", params),
        "resolved": _all(conn, "dlq_report_resolved", params),
        "open": _all(conn, "dlq_report_open", params),
    }
