"""The executor's outcomes, with a fake runtime: no database."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

import taskq
from taskq.model import ClaimedTask
from taskq.outcome import Kind, Outcome
from taskq.worker.executor import Executor


class DeadDatabase:
    """A runtime whose handler connections fail at checkout, as after a restart."""

    def __init__(self, app: taskq.App) -> None:
        self.app = app

    @contextlib.contextmanager
    def sync_connection(self) -> Iterator[Any]:
        raise psycopg.OperationalError("terminating connection due to administrator command")
        yield  # pragma: no cover

    @contextlib.asynccontextmanager
    async def async_connection(self) -> AsyncIterator[Any]:
        raise psycopg.OperationalError("terminating connection due to administrator command")
        yield  # pragma: no cover


def claimed(task_type: str, *, biz_id: str | None = "b-1", timeout: int = 30) -> ClaimedTask:
    now = dt.datetime.now(dt.UTC)
    return ClaimedTask(
        id=7,
        task_type=task_type,
        queue="default",
        biz_id=biz_id,
        payload={},
        priority=0,
        retry_count=0,
        max_retry_count=5,
        timeout_seconds=timeout,
        effective_id=uuid.uuid4(),
        trace_id=None,
        created_at=now,
        scheduled_at=now,
        started_at=now,
    )


async def run(app: taskq.App, task: ClaimedTask, runtime: Any = None) -> list[Outcome]:
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(2) as threads:
        executor = Executor(runtime or DeadDatabase(app), worker_id="w", threads=threads)
        await executor.run(task, outcomes.append)
    return outcomes


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_connection_error_before_the_handler_ran_is_an_uncharged_release(
    is_async: bool,
) -> None:
    app = taskq.App(dsn="postgresql://unused")
    ran = []
    if is_async:

        @app.task("job.points", idempotent=True)
        async def points_async(ctx: taskq.TaskContext, payload: Any) -> None:
            ran.append(1)

    else:

        @app.task("job.points", idempotent=True)
        def points(ctx: taskq.TaskContext, payload: Any) -> None:
            ran.append(1)

    [outcome] = await run(app, claimed("job.points"))
    assert outcome.kind is Kind.RELEASED and not ran
    assert outcome.error is not None and outcome.error.startswith("ConnectionLost: terminating")


async def test_a_connection_error_inside_the_handler_is_a_failure() -> None:
    app = taskq.App(dsn="postgresql://unused")

    @app.task("job.query")
    def query(ctx: taskq.TaskContext, payload: Any) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    [outcome] = await run(app, claimed("job.query"))
    assert outcome.kind is Kind.FAILURE


@pytest.mark.parametrize("wrapped", [False, True])
async def test_a_session_the_server_ended_is_an_uncharged_release(wrapped: bool) -> None:
    """pg_terminate_backend, a restart or a failover under a running handler (its own query, or
    the idempotent commit): the transaction rolled back; not the task's fault."""
    app = taskq.App(dsn="postgresql://unused")

    @app.task("job.query")
    def query(ctx: taskq.TaskContext, payload: Any) -> None:
        try:
            raise psycopg.errors.AdminShutdown(
                "terminating connection due to administrator command"
            )
        except psycopg.Error as exc:
            if wrapped:
                raise RuntimeError("the report query failed") from exc
            raise

    [outcome] = await run(app, claimed("job.query"))
    assert outcome.kind is Kind.RELEASED
    assert outcome.error is not None and outcome.error.startswith("ConnectionLost: ")


async def test_a_cancelled_async_attempt_is_released_once_its_handler_stopped() -> None:
    app = taskq.App(dsn="postgresql://unused")
    started = asyncio.Event()
    stopped = []

    @app.task("job.long")
    async def long(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.append(1)

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(1) as threads:
        executor = Executor(DeadDatabase(app), worker_id="w", threads=threads)
        running = asyncio.create_task(executor.run(claimed("job.long"), outcomes.append))
        await asyncio.wait_for(started.wait(), 5)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert [o.kind for o in outcomes] == [Kind.RELEASED] and stopped == [1]


async def test_a_cancelled_sync_attempt_is_never_released_while_its_thread_runs() -> None:
    app = taskq.App(dsn="postgresql://unused")
    started = threading.Event()
    release = threading.Event()

    @app.task("job.sync")
    def sync(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        release.wait(10)

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(1) as threads:
        executor = Executor(DeadDatabase(app), worker_id="w", threads=threads)
        running = asyncio.create_task(executor.run(claimed("job.sync"), outcomes.append))
        await asyncio.to_thread(started.wait, 5)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        assert outcomes == [] and executor.threads_running == 1
        release.set()
        for _ in range(500):  # the thread's end reaches the loop as a callback
            if executor.threads_running == 0:
                break
            await asyncio.sleep(0.01)
    assert executor.threads_running == 0


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


async def test_an_exception_that_cannot_be_printed_still_fails_the_attempt() -> None:
    """A handler's exception whose ``__str__`` raises is hostile input like any other: the
    attempt is charged as a failure, never left running until the reaper finds it."""
    app = taskq.App(dsn="postgresql://unused")

    @app.task("job.odd")
    async def odd(ctx: taskq.TaskContext, payload: Any) -> None:
        raise Unprintable()

    [outcome] = await run(app, claimed("job.odd"))
    assert outcome.kind is Kind.FAILURE
    assert outcome.error is not None and "<exception str() failed>" in outcome.error
