"""``taskq watch``: follow a task's progress live.

Fed by LISTEN on ``taskq_progress`` (progress is published by the attempt, throttled to a few
messages a second, and a last message carries the final status of tasks that reported
progress). The row is re-read every second as well, so a watcher that starts late, or a task
that never reports progress, still shows the current state and ends with the final status.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from taskq.db import store
from taskq.db.connection import connect
from taskq.errors import TaskNotFound

PROGRESS_CHANNEL = "taskq_progress"
FINAL = ("SUCCESS", "DEAD_LETTER", "CANCELLED")


@dataclass(frozen=True, slots=True)
class Update:
    task_id: int
    task_type: str
    status: str
    percent: float | None
    message: str | None
    error: str | None = None
    retry_at: str | None = None  # when a FAILED task runs again (database clock, ISO 8601)

    def describe(self) -> str:
        """One line: status, progress, and for a failed attempt its error and the retry time."""
        percent = "-" if self.percent is None else f"{self.percent:.0f}%"
        text = f"#{self.task_id} {self.status} {percent} {self.message or ''}".rstrip()
        if self.status in ("FAILED", "DEAD_LETTER") and self.error:
            text += f" — {self.error}"
        if self.retry_at:
            text += f" (retry at {self.retry_at})"
        return text

    @property
    def final(self) -> bool:
        return self.status in FINAL


def _from_row(row: dict[str, Any]) -> Update:
    progress = row.get("progress") or {}
    error = (row.get("last_error") or "").splitlines()
    return Update(
        task_id=int(row["id"]),
        task_type=row["task_type"],
        status=row["status"],
        percent=progress.get("percent"),
        message=progress.get("message"),
        error=error[0] if error else None,
        retry_at=(
            row["next_retry_time"].isoformat(timespec="seconds")
            if row["status"] == "FAILED" and row.get("next_retry_time")
            else None
        ),
    )


def _listen(conn: Any) -> None:
    """LISTEN for progress, except on a hot standby, which cannot LISTEN: there the loop below
    simply polls the row once a second."""
    if not store.in_recovery(conn):
        store.listen_sync(conn, PROGRESS_CHANNEL)


def follow_task(dsn: str, task_id: int, *, timeout: float | None = None) -> Iterator[Update]:
    """Yield the task's state whenever it changes, ending with its final status. A NOTIFY only
    wakes the watcher early; the row is the truth (it is written in the same statement)."""
    with connect(dsn, role="watch", autocommit=True) as conn:
        _listen(conn)
        last: Update | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while last is None or not last.final:
            row = store.get_task(conn, task_id)
            if row is None:
                raise TaskNotFound(f"no task with id {task_id}")
            current = _from_row(row)
            if current != last:
                last = current
                yield current
            if last.final or (deadline is not None and time.monotonic() > deadline):
                return
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass


def follow_type(
    dsn: str, task_type: str, *, timeout: float | None = None
) -> Iterator[list[Update]]:
    """Yield the running tasks of a type whenever the set or their progress changes."""
    with connect(dsn, role="watch", autocommit=True) as conn:
        _listen(conn)
        last: list[Update] | None = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while deadline is None or time.monotonic() < deadline:
            rows = store.running_tasks(conn, task_type=task_type, limit=50)
            current = [_from_row({**r, "status": "PROCESSING"}) for r in rows]
            if current != last:
                last = current
                yield current
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass
