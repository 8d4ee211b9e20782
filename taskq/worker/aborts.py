"""Aborts: the attempts running on this worker that an abort request can reach.

``taskq cancel`` on a PROCESSING task records the request on the row and NOTIFYs
``taskq_abort``; the heartbeat asks again at every beat in case the notification was lost. Either
way the request lands here, on the event loop, and is handed to the attempt's context: the
``ctx.cancelled`` event is set (sync handlers check it), and an async handler's asyncio task is
cancelled. A request that arrives before its attempt started (claimed, not yet running) is kept
for a minute and applied when the attempt registers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import structlog

from taskq.context import TaskContext

log = structlog.get_logger("taskq.worker.aborts")

EARLY_REQUEST_SECONDS = 60.0


class Aborts:
    def __init__(self) -> None:
        self._running: dict[int, TaskContext] = {}
        self._early: dict[int, float] = {}

    def add(self, task_id: int, ctx: TaskContext) -> None:
        self._running[task_id] = ctx
        if self._early and self._early.pop(task_id, None) is not None:
            self._abort(ctx)

    def remove(self, task_id: int, ctx: TaskContext) -> None:
        if self._running.get(task_id) is ctx:
            del self._running[task_id]

    def request(self, task_ids: Iterable[int]) -> None:
        """Abort these attempts if they run here (call on the event loop)."""
        now = time.monotonic()
        for stale in [i for i, at in self._early.items() if now - at > EARLY_REQUEST_SECONDS]:
            del self._early[stale]
        for task_id in task_ids:
            ctx = self._running.get(task_id)
            if ctx is None:
                self._early[task_id] = now
            else:
                self._abort(ctx)

    def _abort(self, ctx: TaskContext) -> None:
        if not ctx.cancelled.is_set():
            log.info("task_abort_requested", task_id=ctx.task_id, task_type=ctx.task_type)
        ctx._request_abort()
