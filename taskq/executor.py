"""The Executor: runs one attempt's handler and reports how it ended.

Async handlers run on the event loop under ``asyncio.timeout``. Sync handlers run in their
queue's own thread pool, so a slow sync handler never blocks async ones and one queue's
threads never starve another queue. A sync thread cannot be killed: when it overruns its
timeout the attempt is reported as failed at once, and the slot stays taken until the thread
really ends (its late result is fenced out by the attempt token).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import store
from taskq.app import App, Task
from taskq.context import TaskContext
from taskq.errors import Permanent, Retry
from taskq.model import ClaimedTask
from taskq.outcome import Outcome
from taskq.progress import ProgressReporter

log = structlog.get_logger("taskq.executor")


class Executor:
    def __init__(
        self,
        app: App,
        pool: AsyncConnectionPool[Any],
        *,
        worker_id: str,
        threads: ThreadPoolExecutor,
        progress_interval_seconds: float = 0.25,
    ) -> None:
        self._app = app
        self._pool = pool
        self._worker_id = worker_id
        self._threads = threads
        self._progress_interval = progress_interval_seconds

    def is_async(self, task_type: str) -> bool:
        return self._app.tasks[task_type].is_async

    async def run(self, task: ClaimedTask, report: Callable[[Outcome], None]) -> None:
        """Run ``task`` and call ``report`` once with its outcome. Returns when the slot is
        free again. Cancellation (a forced shutdown) propagates without a report."""
        handler = self._app.tasks[task.task_type]
        loop = asyncio.get_running_loop()

        async def write_progress(value_json: str) -> bool:
            async with self._pool.connection() as conn:
                return await store.set_progress(
                    conn, task_id=task.id, token=task.effective_id, progress_json=value_json
                )

        reporter = ProgressReporter(
            loop, write_progress, min_interval_seconds=self._progress_interval
        )
        ctx = TaskContext(task, worker_id=self._worker_id, reporter=reporter)
        with structlog.contextvars.bound_contextvars(
            task_id=task.id,
            task_type=task.task_type,
            biz_id=task.biz_id,
            trace_id=task.trace_id,
            attempt=task.retry_count,
            worker_id=self._worker_id,
        ):
            log.debug("task_started", queue=task.queue)
            started = time.monotonic()
            try:
                if handler.is_async:
                    outcome = await self._run_async(handler, ctx, task, started)
                    await _flush(reporter)
                    report(outcome)
                else:
                    await self._run_sync(handler, ctx, task, started, reporter, report)
            except asyncio.CancelledError:
                reporter.cancel()
                raise

    async def _run_async(
        self, handler: Task, ctx: TaskContext, task: ClaimedTask, started: float
    ) -> Outcome:
        scope = asyncio.timeout(task.timeout_seconds)
        try:
            async with scope:
                await handler.fn(ctx, task.payload)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                return Outcome.failure(
                    task,
                    time.monotonic() - started,
                    None,
                    f"TimeoutError: timed out after {task.timeout_seconds}s",
                )
            return classify(task, time.monotonic() - started, exc)
        return Outcome.success(task, time.monotonic() - started)

    async def _run_sync(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        started: float,
        reporter: ProgressReporter,
        report: Callable[[Outcome], None],
    ) -> None:
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, context.run, handler.fn, ctx, task.payload)
        done, _ = await asyncio.wait({future}, timeout=task.timeout_seconds)
        if not done:
            report(
                Outcome.failure(
                    task,
                    time.monotonic() - started,
                    None,
                    f"TimeoutError: timed out after {task.timeout_seconds}s",
                )
            )
            log.warning("task_overran_timeout", timeout_seconds=task.timeout_seconds)
            # Keep the slot until the thread is really gone; its result is discarded.
            await asyncio.wait({future})
            log.warning("task_finished_after_timeout", duration_ms=_ms(started))
            return
        exc = future.exception()
        await _flush(reporter)
        if exc is None:
            report(Outcome.success(task, time.monotonic() - started))
        else:
            report(classify(task, time.monotonic() - started, exc))


def classify(task: ClaimedTask, duration: float, exc: BaseException) -> Outcome:
    if isinstance(exc, Permanent):
        return Outcome.dead(task, duration, exc)
    if isinstance(exc, Retry):
        return Outcome.retry(task, duration, exc, exc.after)
    return Outcome.failure(task, duration, exc)


async def _flush(reporter: ProgressReporter) -> None:
    try:
        await reporter.flush()
    except Exception:  # progress is best effort; the outcome is not
        log.warning("progress_flush_failed", exc_info=True)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
