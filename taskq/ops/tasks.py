"""Tasks, workers and schedules as operators see them: one task in full with its tree, the
workers and their heartbeats, the schedules, enqueue by hand, one reaper pass. Used by the CLI
(``taskq show / workers / schedules / enqueue / reap``) and the dashboard's task page.

Sync functions with short sessions; the dashboard runs them in worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import TaskNotFound
from taskq.model import FINAL_STATUSES, JSON

if TYPE_CHECKING:
    from taskq.app import App, EnqueueOptions
    from taskq.worker.reaper import ReapResult

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TaskDetail:
    row: Row | None
    """None when the task is gone (discarded or pruned); its audit history may remain."""
    tree: list[Row]
    audit: list[Row]

    @property
    def final(self) -> bool:
        return self.row is None or self.row["status"] in FINAL_STATUSES


def task_detail(dsn: str, task_id: int) -> TaskDetail:
    """The task, its tree of child tasks and its audit history; a task that is gone but has
    audit rows (discarded) still has a detail."""
    with session(dsn) as conn:
        row = store.get_task(conn, task_id)
        tree = store.task_tree(conn, task_id) if row is not None else []
        audit = store.audit_for_task(conn, task_id)
    if row is None and not audit:
        raise TaskNotFound(f"no task with id {task_id}")
    return TaskDetail(row=row, tree=tree, audit=audit)


def show(dsn: str, task_id: int) -> tuple[Row, list[Row], list[Row]]:
    """``taskq show``: the task row (it must exist), its audit history and its tree."""
    with session(dsn) as conn:
        row = store.get_task(conn, task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id}")
        audit = store.audit_for_task(conn, task_id)
        tree = store.task_tree(conn, task_id)
    return row, audit, tree


def list_workers(dsn: str) -> list[Row]:
    with session(dsn) as conn:
        return store.list_workers(conn)


def list_schedules(dsn: str) -> list[Row]:
    with session(dsn) as conn:
        return store.list_schedules(conn)


def enqueue(
    dsn: str, app: App, task_type: str, payload: JSON, **options: Unpack[EnqueueOptions]
) -> int:
    """One task by hand, in its own transaction, with ``app``'s registered options."""
    with session(dsn) as conn:
        task_id: int = app.enqueue(conn, task_type, payload, **options)
    return task_id


def reap(dsn: str, *, grace_seconds: float, orphan_after_seconds: float) -> ReapResult:
    """One reaper pass now (safe beside the leader's: rescues are guarded, rows SKIP LOCKED)."""
    from taskq.worker.reaper import reap_once

    return reap_once(dsn, grace_seconds=grace_seconds, orphan_after_seconds=orphan_after_seconds)
