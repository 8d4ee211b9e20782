"""What a handler gets besides its payload."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from taskq.model import JSON, ClaimedTask

if TYPE_CHECKING:
    from taskq.progress import ProgressReporter


class TaskContext:
    """One attempt of one task, as seen by its handler.

    ``attempt`` is the task's retry_count when this run was claimed: 0 on the first run, 1 on
    the first retry, and so on. ``effective_id`` is the attempt's token; pass it (or
    ``task_id`` + ``attempt``) downstream as an idempotency key for effects outside PostgreSQL.
    """

    __slots__ = ("_reporter", "_task", "worker_id")

    def __init__(self, task: ClaimedTask, *, worker_id: str, reporter: ProgressReporter) -> None:
        self._task = task
        self._reporter = reporter
        self.worker_id = worker_id

    @property
    def task_id(self) -> int:
        return self._task.id

    @property
    def task_type(self) -> str:
        return self._task.task_type

    @property
    def queue(self) -> str:
        return self._task.queue

    @property
    def biz_id(self) -> str | None:
        return self._task.biz_id

    @property
    def attempt(self) -> int:
        return self._task.retry_count

    @property
    def max_retry_count(self) -> int:
        return self._task.max_retry_count

    @property
    def trace_id(self) -> str | None:
        return self._task.trace_id

    @property
    def payload(self) -> JSON:
        return self._task.payload

    @property
    def effective_id(self) -> uuid.UUID:
        return self._task.effective_id

    @property
    def lease_lost(self) -> bool:
        """True once a write of this attempt matched no row: the task was taken away."""
        return self._reporter.lease_lost

    def progress(self, percent: float, message: str | None = None) -> None:
        """Report progress (0-100). Never blocks: the latest value is stored on the row and
        published on the ``taskq_progress`` channel at most a few times per second."""
        pct = max(0.0, min(100.0, float(percent)))
        value = {"percent": pct, "message": message}
        self._reporter.submit(json.dumps(value, separators=(",", ":")))
