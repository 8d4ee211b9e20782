"""Cancel pending tasks and abort running ones, for operators (``taskq cancel``).

By ids, all-or-nothing: a SUCCESS or DEAD_LETTER task (or an unknown id) refuses the whole
call with the status named. By task type or business key: every unfinished task of it. The
write is ``taskq.cancel_v1`` (audited by the database with actor = session_user; ``by`` is
kept in the audit detail).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError
from taskq.model import FINAL_STATUSES, Status
from taskq.ops.dlq import actor

Row = dict[str, Any]

MAX_TASKS = 100_000
"""--task-type/--biz-id cancel at most this many tasks in one call (one transaction)."""


@dataclass(frozen=True, slots=True)
class Target:
    ids: tuple[int, ...] = ()
    task_type: str | None = None
    biz_id: str | None = None

    def check(self) -> None:
        if self.ids and (self.task_type is not None or self.biz_id is not None):
            raise ConfigError("give IDs, or --task-type / --biz-id, not both")
        if not self.ids and self.task_type is None and self.biz_id is None:
            raise ConfigError("say which tasks: IDs, --task-type T, or --biz-id B")


@dataclass(slots=True)
class Cancelled:
    cancelled: list[int] = field(default_factory=list)  # PENDING/FAILED -> CANCELLED
    aborting: list[int] = field(default_factory=list)  # PROCESSING: abort requested
    already: list[int] = field(default_factory=list)  # were CANCELLED before
    refused: list[Row] = field(default_factory=list)  # dry run: what would refuse the call

    def as_dict(self) -> dict[str, Any]:
        return {
            "cancelled": self.cancelled,
            "abort_requested": self.aborting,
            "already_cancelled": self.already,
            "refused": [{"id": r["id"], "status": r["status"]} for r in self.refused],
        }


def _ids(conn: Any, target: Target) -> list[Row]:
    if target.ids:
        found = store.tasks_by_ids(conn, target.ids)
        known = {int(r["id"]) for r in found}
        missing = [
            {"id": i, "status": "no such task", "task_type": None}
            for i in target.ids
            if i not in known
        ]
        return found + missing
    return store.cancel_candidates(
        conn, task_type=target.task_type, biz_id=target.biz_id, limit=MAX_TASKS
    )


def preview(dsn: str, target: Target) -> Cancelled:
    """What ``cancel`` would do (children are not listed)."""
    target.check()
    result = Cancelled()
    with session(dsn) as conn:
        for row in _ids(conn, target):
            status = row["status"]
            if status == Status.CANCELLED:
                result.already.append(int(row["id"]))
            elif status in FINAL_STATUSES or status == "no such task":
                result.refused.append(row)
            elif status == Status.PROCESSING:
                result.aborting.append(int(row["id"]))
            else:
                result.cancelled.append(int(row["id"]))
    return result


def cancel(
    dsn: str,
    target: Target,
    *,
    with_children: bool = False,
    note: str | None = None,
    by: str | None = None,
) -> Cancelled:
    target.check()
    result = Cancelled()
    with session(dsn) as conn:
        ids = [int(r["id"]) for r in _ids(conn, target)]
        if not ids:
            return result
        rows = store.cancel_tasks(
            conn, ids, with_children=with_children, note=note, by=by or actor()
        )
    for row in rows:
        task_id = int(row["task_id"])
        if row["status_from"] == Status.CANCELLED:
            result.already.append(task_id)
        elif row["status_to"] == Status.PROCESSING:
            result.aborting.append(task_id)
        else:
            result.cancelled.append(task_id)
    return result
