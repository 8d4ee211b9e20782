"""The Executor: runs one attempt's handler and reports how it ended.

Async handlers run on the event loop under ``asyncio.timeout``. Sync handlers run in their
queue's own thread pool, so a slow sync handler never blocks async ones and one queue's
threads never starve another queue. A sync thread cannot be killed: when it overruns its
timeout the attempt is reported as failed at once, and the slot stays taken until the thread
really ends (its late result is fenced out by the attempt token).

Idempotent handlers run inside one transaction that takes the (task_type, biz_id) key in
``taskq.task_executed``, holds the handler's business writes, and marks the task SUCCESS
(fenced by the token). All commit together, or none do: a second delivery of the same key
finds it taken and completes without running the handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from taskq import logs, store
from taskq.app import Task
from taskq.context import TaskContext
from taskq.errors import LeaseLost, Permanent, Retry
from taskq.model import ClaimedTask
from taskq.outcome import Outcome
from taskq.progress import ProgressReporter
from taskq.runtime import WorkerRuntime

log = structlog.get_logger("taskq.executor")


class Executor:
    def __init__(
        self,
        runtime: WorkerRuntime,
        *,
        worker_id: str,
        threads: ThreadPoolExecutor,
        progress_interval_seconds: float = 0.25,
        log_payloads: bool = False,
    ) -> None:
        self._runtime = runtime
        self._log_payloads = log_payloads
        self._app = runtime.app
        self._worker_id = worker_id
        self._threads = threads
        self._progress_interval = progress_interval_seconds
        self._loop: asyncio.AbstractEventLoop | None = None

    def is_async(self, task_type: str) -> bool:
        return self._app.tasks[task_type].is_async

    async def run(self, task: ClaimedTask, report: Callable[[Outcome], None]) -> None:
        """Run ``task`` and call ``report`` once with its outcome (not at all when the lease
        was lost). Returns when the slot is free again. Cancellation (a forced shutdown, a
        lost lease) propagates without a report."""
        handler = self._app.tasks[task.task_type]
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        loop = self._loop

        def make_reporter() -> ProgressReporter:
            """Built on the first ctx.progress() only: most handlers never report progress."""

            async def write_progress(value_json: str) -> bool:
                async with self._runtime.async_connection() as conn:
                    return await store.set_progress(
                        conn, task_id=task.id, token=task.effective_id, progress_json=value_json
                    )

            return ProgressReporter(
                loop, write_progress, min_interval_seconds=self._progress_interval
            )

        ctx = TaskContext(
            task, worker_id=self._worker_id, reporter=make_reporter, runtime=self._runtime
        )
        bound: dict[str, Any] = {
            "task_id": task.id,
            "task_type": task.task_type,
            "biz_id": task.biz_id,
            "trace_id": task.trace_id,
            "attempt": task.retry_count,
            "worker_id": self._worker_id,
        }
        if self._log_payloads:
            bound["payload"] = task.payload
        token = logs.TASK_FIELDS.set(bound)
        try:
            log.debug("task_started", queue=task.queue)
            started = time.monotonic()
            try:
                if handler.options.idempotent and not task.biz_id:
                    report(Outcome.dead(task, 0.0, Permanent("idempotent task has no biz_id")))
                elif handler.is_async:
                    outcome = await self._run_async(handler, ctx, task, started)
                    if outcome is not None:
                        report(outcome)
                else:
                    await self._run_sync(handler, ctx, task, started, report)
            except asyncio.CancelledError:
                if ctx._reporter is not None:
                    ctx._reporter.cancel()
                raise
        finally:
            logs.TASK_FIELDS.reset(token)

    async def _run_async(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        started: float,
    ) -> Outcome | None:
        scope = asyncio.timeout(task.timeout_seconds)
        duplicate = False
        try:
            if handler.options.idempotent:
                async with self._runtime.async_connection() as conn, conn.transaction():
                    duplicate = not await store.arecord_business_key(conn, task)
                    if not duplicate:
                        async with ctx._aattached(conn), scope:
                            await handler.fn(ctx, task.payload)
                    await _flush(ctx)
                    if not await store.amark_success(conn, task, duplicate=duplicate):
                        raise LeaseLost(f"task {task.id}: attempt taken away; rolled back")
                return Outcome.committed(task, time.monotonic() - started, duplicate=duplicate)
            async with scope:
                await handler.fn(ctx, task.payload)
        except LeaseLost as exc:
            _lost(task, exc)
            return None
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                return _timed_out(task, started)
            return classify(task, time.monotonic() - started, exc)
        await _flush(ctx)
        return Outcome.success(task, time.monotonic() - started)

    async def _run_sync(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        started: float,
        report: Callable[[Outcome], None],
    ) -> None:
        loop = asyncio.get_running_loop()

        def flush_from_thread() -> None:
            if ctx._reporter is not None:
                asyncio.run_coroutine_threadsafe(_flush(ctx), loop).result(timeout=30)

        def idempotent() -> bool:
            """In the handler's thread: the whole transaction. Returns 'was a duplicate'."""
            with self._runtime.sync_connection() as conn, conn.transaction():
                duplicate = not store.record_business_key(conn, task)
                if not duplicate:
                    with ctx._attached(conn):
                        handler.fn(ctx, task.payload)
                flush_from_thread()
                if not store.mark_success(conn, task, duplicate=duplicate):
                    raise LeaseLost(f"task {task.id}: attempt taken away; rolled back")
            return duplicate

        context = contextvars.copy_context()
        if handler.options.idempotent:
            future = loop.run_in_executor(self._threads, context.run, idempotent)
        else:
            future = loop.run_in_executor(self._threads, context.run, handler.fn, ctx, task.payload)
        done, _ = await asyncio.wait({future}, timeout=task.timeout_seconds)
        if not done:
            report(_timed_out(task, started))
            log.warning("task_overran_timeout", timeout_seconds=task.timeout_seconds)
            # Keep the slot until the thread is really gone; its result is discarded.
            await asyncio.wait({future})
            log.warning("task_finished_after_timeout", duration_ms=_ms(started))
            return
        exc = future.exception()
        duration = time.monotonic() - started
        if isinstance(exc, LeaseLost):
            _lost(task, exc)
        elif exc is not None:
            report(classify(task, duration, exc))
        elif handler.options.idempotent:
            report(Outcome.committed(task, duration, duplicate=bool(future.result())))
        else:
            await _flush(ctx)
            report(Outcome.success(task, duration))


def classify(task: ClaimedTask, duration: float, exc: BaseException) -> Outcome:
    if isinstance(exc, Permanent):
        return Outcome.dead(task, duration, exc)
    if isinstance(exc, Retry):
        return Outcome.retry(task, duration, exc, exc.after)
    return Outcome.failure(task, duration, exc)


def _timed_out(task: ClaimedTask, started: float) -> Outcome:
    return Outcome.failure(
        task,
        time.monotonic() - started,
        None,
        f"TimeoutError: timed out after {task.timeout_seconds}s",
    )


def _lost(task: ClaimedTask, exc: LeaseLost) -> None:
    log.warning("lease_lost", effective_id=str(task.effective_id), reason=str(exc))


async def _flush(ctx: TaskContext) -> None:
    if ctx._reporter is None:
        return
    try:
        await ctx._reporter.flush()
    except Exception:  # progress is best effort; the outcome is not
        log.warning("progress_flush_failed", exc_info=True)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
