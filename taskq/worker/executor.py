"""The Executor: runs one attempt's handler and reports how it ended.

Async handlers run on the event loop under ``asyncio.timeout``. Sync handlers run in their
queue's own thread pool, so a slow sync handler never blocks async ones and one queue's
threads never starve another queue. A sync thread cannot be killed: when it overruns its
timeout the attempt is reported as failed at once, and the slot stays taken until the thread
really ends (its late result is fenced out by the attempt token).

Idempotent handlers run inside one transaction that takes the (task_type, biz_id) key in
``taskq.task_executed``, holds the handler's business writes, and marks the task SUCCESS
(fenced by the token, with the completer's own statement). All commit together, or none do: a
second delivery of the same key finds it taken and completes without running the handler.

An attempt that can no longer run and did not finish is reported RELEASED (given back,
uncharged): an async handler once its cancellation has gone through (shutdown), an attempt whose
handler connection failed before the handler ran anything. A sync thread cannot be stopped, so
a cancelled sync attempt whose thread still runs is never released: the row stays PROCESSING
until the thread ends or the process exits (then the reaper rescues it).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import structlog

from taskq import logs, tracing
from taskq.app import Task
from taskq.context import TaskContext
from taskq.db import store
from taskq.db.connection import ConnectionError_, first_line
from taskq.errors import LeaseLost, Permanent, Retry
from taskq.model import ClaimedTask
from taskq.outcome import Kind, Outcome
from taskq.progress import ProgressReporter
from taskq.worker.aborts import Aborts
from taskq.worker.completer import acommit_success, commit_success
from taskq.worker.runtime import WorkerRuntime

log = structlog.get_logger("taskq.worker.executor")


class Executor:
    def __init__(
        self,
        runtime: WorkerRuntime,
        *,
        worker_id: str,
        threads: ThreadPoolExecutor,
        progress_interval_seconds: float = 0.25,
        log_payloads: bool = False,
        aborts: Aborts | None = None,
    ) -> None:
        self._runtime = runtime
        self._aborts = aborts or Aborts()
        self._log_payloads = log_payloads
        self._app = runtime.app
        self._worker_id = worker_id
        self._threads = threads
        self._progress_interval = progress_interval_seconds
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._deadlines = Deadlines()

    @property
    def threads_running(self) -> int:
        """Sync handler threads this executor stopped waiting for that still run (a forced
        stop, or an overrun at shutdown). The process must exit rather than wait for them."""
        return sum(not f.done() for f in self._abandoned)

    def is_async(self, task_type: str) -> bool:
        return self._app.tasks[task_type].is_async

    async def run(self, task: ClaimedTask, report: Callable[[Outcome], None]) -> None:
        """Run ``task`` and call ``report`` once with its outcome (not at all when the lease
        was lost). Returns when the slot is free again. Cancellation (a forced shutdown, a
        lost lease) propagates, after an async attempt has reported itself released."""
        handler = self._app.tasks[task.task_type]
        ctx = TaskContext(
            task, worker_id=self._worker_id, reporter=self._new_reporter, runtime=self._runtime
        )
        token = logs.TASK_FIELDS.set((task, self._worker_id, self._log_payloads))
        self._aborts.add(task.id, ctx)
        try:
            span = tracing.attempt_span(task, self._worker_id)
            if span is None:  # tracing off: nothing to enter
                await self._attempt(handler, ctx, task, report)
            else:
                with span as attempt:
                    await self._attempt(handler, ctx, task, attempt.reporting(report))
        finally:
            self._aborts.remove(task.id, ctx)
            logs.TASK_FIELDS.reset(token)

    def _new_reporter(self, task: ClaimedTask) -> ProgressReporter:
        """Built on the first ctx.progress() only: most handlers never report progress."""

        async def write_progress(value_json: str) -> bool:
            async with self._runtime.async_connection() as conn:
                return await store.set_progress(
                    conn, task_id=task.id, token=task.effective_id, progress_json=value_json
                )

        return ProgressReporter(
            self._deadlines.loop(), write_progress, min_interval_seconds=self._progress_interval
        )

    async def _attempt(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        report: Callable[[Outcome], None],
    ) -> None:
        if logs.enabled(logging.DEBUG):
            log.debug("task_started", queue=task.queue)
        started = time.monotonic()
        try:
            if handler.options.idempotent and not task.biz_id:
                report(Outcome.dead(task, 0.0, Permanent("idempotent task has no biz_id")))
            elif handler.is_async:
                # Nothing is awaited after the report: a cancellation always comes before it.
                report(await self._run_async(handler, ctx, task, started))
            else:
                await self._run_sync(handler, ctx, task, started, report)
        except asyncio.CancelledError:
            if ctx._reporter is not None:
                ctx._reporter.cancel()
            if handler.is_async:
                # The handler's coroutine has ended without an outcome: this attempt can no
                # longer run. (A sync thread cannot be stopped: see _run_sync.)
                report(
                    Outcome.released(
                        task, time.monotonic() - started, "Interrupted: worker shutting down"
                    )
                )
            raise

    async def _run_async(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        started: float,
    ) -> Outcome:
        scope = self._deadlines.scope(task.timeout_seconds, ctx)
        duplicate = False
        ran = False
        try:
            if handler.options.idempotent:
                async with self._runtime.async_connection() as conn, conn.transaction():
                    duplicate = not await store.arecord_business_key(conn, task)
                    if not duplicate:
                        ran = True
                        async with ctx._aattached(conn):
                            with scope:
                                await handler.fn(ctx, task.payload)
                    await _flush(ctx)
                    if not await acommit_success(conn, task, duplicate=duplicate):
                        raise LeaseLost(f"task {task.id}: attempt taken away; rolled back")
                return Outcome.committed(task, time.monotonic() - started, duplicate=duplicate)
            ran = True
            with scope:
                await handler.fn(ctx, task.payload)
        except LeaseLost:
            return Outcome.lost(task, time.monotonic() - started)
        except Exception as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                return _timed_out(task, started, ctx)
            if not ran and isinstance(exc, ConnectionError_):
                return _unreachable(task, started, exc)
            return classify(task, time.monotonic() - started, exc, ctx)
        if ctx._reporter is not None:
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
        loop = self._deadlines.loop()
        ran = threading.Event()  # set in the thread once the handler is about to run

        def flush_from_thread() -> None:
            if ctx._reporter is not None:
                asyncio.run_coroutine_threadsafe(_flush(ctx), loop).result(timeout=30)

        def plain() -> None:
            ran.set()
            handler.fn(ctx, task.payload)

        def idempotent() -> bool:
            """In the handler's thread: the whole transaction. Returns 'was a duplicate'."""
            with self._runtime.sync_connection() as conn, conn.transaction():
                duplicate = not store.record_business_key(conn, task)
                if not duplicate:
                    ran.set()
                    with ctx._attached(conn):
                        handler.fn(ctx, task.payload)
                flush_from_thread()
                if not commit_success(conn, task, duplicate=duplicate):
                    raise LeaseLost(f"task {task.id}: attempt taken away; rolled back")
            return duplicate

        context = contextvars.copy_context()
        body = idempotent if handler.options.idempotent else plain
        future = loop.run_in_executor(self._threads, context.run, body)
        try:
            done, _ = await asyncio.wait({future}, timeout=task.timeout_seconds)
        except asyncio.CancelledError:
            if future.done():  # the thread ended just now: its result is the outcome
                report(self._sync_outcome(handler, ctx, task, started, future, ran))
            else:
                # Never released while the thread runs: another worker would run it at the same
                # time. The row stays PROCESSING until the process exits; then the reaper.
                self._abandoned.add(future)
                log.warning("task_abandoned", reason="thread still running at a forced stop")
            raise
        if not done:
            report(_timed_out(task, started, ctx))
            log.warning("task_overran_timeout", timeout_seconds=task.timeout_seconds)
            # Keep the slot until the thread is really gone; its result is discarded. (At
            # shutdown this wait is cancelled: the outcome is written already.)
            try:
                await asyncio.wait({future})
            except asyncio.CancelledError:
                self._abandoned.add(future)
                raise
            log.warning("task_finished_after_timeout", duration_ms=_ms(started))
            return
        outcome = self._sync_outcome(handler, ctx, task, started, future, ran)
        if outcome.kind is Kind.SUCCESS:
            await _flush(ctx)
        report(outcome)

    def _sync_outcome(
        self,
        handler: Task,
        ctx: TaskContext,
        task: ClaimedTask,
        started: float,
        future: asyncio.Future[Any],
        ran: threading.Event,
    ) -> Outcome:
        exc = future.exception()
        duration = time.monotonic() - started
        if isinstance(exc, LeaseLost):
            return Outcome.lost(task, duration)
        if exc is not None and not ran.is_set() and isinstance(exc, ConnectionError_):
            return _unreachable(task, started, exc)
        if exc is not None:
            return classify(task, duration, exc, ctx)
        if handler.options.idempotent:
            return Outcome.committed(task, duration, duplicate=bool(future.result()))
        return Outcome.success(task, duration)


class Deadline:
    """One async attempt's timeout: ``asyncio.timeout`` semantics (the attempt's asyncio task is
    cancelled when it is due, and leaving the block turns that cancellation into
    ``TimeoutError``), but timed by its executor's one shared timer (``Deadlines``) instead
    of a timer handle of its own per attempt. A plain (not async) context manager: entering
    and leaving awaits nothing, and two coroutines per attempt were measurable.

    Given the attempt's context, it also lets an abort request end the handler while inside:
    the request makes the deadline expire now, so the handler is cancelled exactly as a timeout
    cancels it (no extra asyncio task per attempt), and ``ctx.cancelled`` tells the two apart
    afterwards."""

    __slots__ = ("_cancelling", "_ctx", "_owner", "_state", "_task", "timeout", "when")

    _CREATED, _ENTERED, _EXPIRING, _EXPIRED, _EXITED = range(5)

    def __init__(
        self, owner: Deadlines, timeout: float | None, ctx: TaskContext | None = None
    ) -> None:
        self._owner = owner
        self._ctx = ctx
        self._state = Deadline._CREATED
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self.timeout = timeout
        self.when = 0.0

    def __enter__(self) -> Deadline:
        if self._state != Deadline._CREATED:
            raise RuntimeError("a Deadline is entered once")
        task = asyncio.current_task(self._owner.loop())
        if task is None:
            raise RuntimeError("a Deadline is used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = Deadline._ENTERED
        if self.timeout is not None:
            self._owner.add(self)
        ctx = self._ctx
        if ctx is not None:
            ctx._abort = self.expire_soon
            if ctx._abort_requested:  # the request came before the handler started
                self.expire_soon()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ctx is not None:
            self._ctx._abort = None
        self._owner.discard(self)
        if self._state == Deadline._EXPIRING:
            self._state = Deadline._EXPIRED
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc  # no other cancel request: this one is ours
        elif self._state == Deadline._ENTERED:
            self._state = Deadline._EXITED

    def expire(self) -> None:
        """Due now: cancel the attempt's task (once; nothing after the block was left)."""
        if self._state == Deadline._ENTERED:
            assert self._task is not None
            self._task.cancel()
            self._state = Deadline._EXPIRING

    def expire_soon(self) -> None:
        """Due at once: cancelled on the next turn of the loop (``reschedule(0)``)."""
        self._owner.loop().call_soon(self.expire)

    def expired(self) -> bool:
        return self._state in (Deadline._EXPIRING, Deadline._EXPIRED)


class Deadlines:
    """The timeouts of every running async attempt of one executor, on one timer.

    Deadlines of one timeout value are registered in the order they fall due (the loop's clock
    only moves forward), so each value keeps an insertion-ordered dict: adding and removing are
    O(1), the earliest deadline is the front of one of the few dicts. The timer is armed for
    the earliest front; when it fires, what is due expires and it is armed again. An attempt
    that ends removes its entry and leaves the timer alone (a timer that finds nothing due
    simply re-arms or stops), so a drain of short tasks costs no timer handle per task."""

    def __init__(self) -> None:
        self._by_timeout: dict[float, dict[Deadline, None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, looked up once for the executor and its deadlines:
        ``asyncio.get_running_loop()`` is a ``getpid()`` system call each time (3% of a drain
        worker's CPU when called twice per attempt)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def scope(self, timeout: float | None, ctx: TaskContext | None = None) -> Deadline:
        return Deadline(self, timeout, ctx)

    def add(self, deadline: Deadline) -> None:
        assert deadline.timeout is not None
        loop = self.loop()
        deadline.when = loop.time() + deadline.timeout
        entries = self._by_timeout.get(deadline.timeout)
        if entries is None:
            entries = self._by_timeout[deadline.timeout] = {}
        entries[deadline] = None
        if deadline.when < self._timer_when:
            self._arm(loop, deadline.when)

    def discard(self, deadline: Deadline) -> None:
        entries = self._by_timeout.get(deadline.timeout)  # type: ignore[arg-type]
        if entries is not None:
            entries.pop(deadline, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._fire)
        self._timer_when = when

    def _fire(self) -> None:
        self._timer = None
        self._timer_when = float("inf")
        loop = self.loop()
        now = loop.time()
        earliest = float("inf")
        for timeout, entries in list(self._by_timeout.items()):
            while entries:
                deadline = next(iter(entries))
                if deadline.when > now:
                    earliest = min(earliest, deadline.when)
                    break
                del entries[deadline]
                deadline.expire()
            if not entries:
                del self._by_timeout[timeout]
        if earliest < float("inf"):
            self._arm(loop, earliest)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._by_timeout.values())


def classify(
    task: ClaimedTask, duration: float, exc: BaseException, ctx: TaskContext | None = None
) -> Outcome:
    """An abort request wins over whatever the handler raised on its way out: an operator
    asked for the task to stop, and it did."""
    if ctx is not None and ctx._abort_requested:
        return Outcome.cancelled(task, duration, f"Cancelled: aborted on request ({_type(exc)})")
    if _server_went_away(exc):
        return Outcome.released(task, duration, f"ConnectionLost: {first_line(exc)}")
    if isinstance(exc, Permanent):
        return Outcome.dead(task, duration, exc)
    if isinstance(exc, Retry):
        return Outcome.retry(task, duration, exc, exc.after)
    return Outcome.failure(task, duration, exc)


# The server ended the session for a reason of its own: pg_terminate_backend or a fast
# shutdown (57P01), another backend's crash (57P02), a server still starting (57P03).
_SERVER_WENT_AWAY = frozenset({"57P01", "57P02", "57P03"})


def _server_went_away(exc: BaseException) -> bool:
    """The attempt failed because the database ended its session (a restart, a failover, an
    administrator), not because of the task: its transaction rolled back, so it is given back
    uncharged, like a crash of the database's making, and the breaker does not see it. A
    backend that crashes by itself gives no such code: that failure is charged (a query that
    crashes the server is poison, and must end)."""
    seen: BaseException | None = exc
    for _ in range(5):  # the handler may have wrapped it
        if seen is None:
            return False
        if getattr(seen, "sqlstate", None) in _SERVER_WENT_AWAY:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _type(exc: BaseException) -> str:
    return type(exc).__name__


def _timed_out(task: ClaimedTask, started: float, ctx: TaskContext | None = None) -> Outcome:
    duration = time.monotonic() - started
    if ctx is not None and ctx._abort_requested:
        # An async handler aborted (its scope made to expire), or a handler that ignored the
        # request and ran into its real timeout: CANCELLED either way.
        why = (
            "Cancelled: aborted on request"
            if duration < task.timeout_seconds
            else f"Cancelled: abort requested; ran to its timeout ({task.timeout_seconds}s)"
        )
        return Outcome.cancelled(task, duration, why)
    return Outcome.failure(
        task,
        duration,
        None,
        f"TimeoutError: timed out after {task.timeout_seconds}s",
    )


def _unreachable(task: ClaimedTask, started: float, exc: BaseException) -> Outcome:
    """The handler's connection failed before the handler ran anything: not the task's fault
    (a restart, a terminated backend): give it back uncharged; the breaker does not see it."""
    return Outcome.released(task, time.monotonic() - started, f"ConnectionLost: {first_line(exc)}")


async def _flush(ctx: TaskContext) -> None:
    if ctx._reporter is None:
        return
    try:
        await ctx._reporter.flush()
    except Exception:  # progress is best effort; the outcome is not
        log.warning("progress_flush_failed", exc_info=True)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
