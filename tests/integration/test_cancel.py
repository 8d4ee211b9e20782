"""Cancel and abort, end to end in process: a pending task never runs; a running async handler
is cancelled, a sync one stops at its next ctx.raise_if_cancelled(); one that ignores the
request is recorded CANCELLED at its timeout; app.cancel joins the caller's transaction."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import rows, status_of, wait_until


def cancel(dsn: str, task_id: int, **kw: Any) -> taskq.Status:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn, conn.transaction():
        return app.cancel(conn, task_id, **kw)


def is_status(dsn: str, task_id: int, status: str) -> Any:
    return lambda: status_of(dsn, task_id)["status"] == status


async def test_cancelled_pending_task_never_runs(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    ran: list[int] = []

    @app.task("job.later")
    async def later(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.append(ctx.task_id)

    with psycopg.connect(dsn, autocommit=True) as conn:
        doomed = app.enqueue(conn, "job.later", {}, delay=0.5)
        kept = app.enqueue(conn, "job.later", {}, delay=0.5)
    assert cancel(dsn, doomed, note="not needed") is taskq.Status.CANCELLED
    await worker_factory(app)
    await wait_until(is_status(dsn, kept, "SUCCESS"), what="the other task ran")
    assert ran == [kept]
    row = status_of(dsn, doomed)
    assert row["status"] == "CANCELLED" and row["finished_at"] and row["abort_requested_at"]
    audit = rows(
        dsn, "SELECT actor, action, note, detail FROM taskq.audit WHERE task_id = %s", [doomed]
    )
    assert [(a["action"], a["note"], a["detail"]["status_from"]) for a in audit] == [
        ("cancel", "not needed", "PENDING")
    ]
    assert audit[0]["actor"] == rows(dsn, "SELECT session_user AS u")[0]["u"]


async def test_running_async_handler_is_cancelled_within_a_second(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @app.task("job.slow", timeout=60)
    async def slow(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "job.slow", {})
    await worker_factory(app)
    await asyncio.wait_for(started.wait(), 10)
    asked = time.monotonic()
    assert await asyncio.to_thread(cancel, dsn, task_id) is taskq.Status.PROCESSING
    await asyncio.wait_for(cancelled.wait(), 1.0)
    await wait_until(is_status(dsn, task_id, "CANCELLED"), timeout=5, what="CANCELLED")
    elapsed = time.monotonic() - asked
    assert elapsed < 1.0, f"recorded CANCELLED {elapsed:.2f}s after the request"
    row = status_of(dsn, task_id)
    assert row["retry_count"] == 0 and row["next_retry_time"] is None
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.breakers")[0]["n"] == 0
    outcomes = rows(dsn, "SELECT outcome, n FROM taskq.task_stats")
    assert [(o["outcome"], o["n"]) for o in outcomes] == [("cancelled", 1)]


async def test_sync_handler_stops_at_raise_if_cancelled(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    started = threading.Event()
    steps: list[int] = []

    @app.task("job.loop", timeout=60)
    def loop(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        for step in range(600):
            ctx.raise_if_cancelled()
            steps.append(step)
            time.sleep(0.05)

    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "job.loop", {})
    await worker_factory(app)
    assert await asyncio.to_thread(started.wait, 10)
    asked = time.monotonic()
    await asyncio.to_thread(cancel, dsn, task_id)
    await wait_until(is_status(dsn, task_id, "CANCELLED"), timeout=5, what="CANCELLED")
    assert time.monotonic() - asked < 1.0
    assert len(steps) < 600


async def test_handler_that_ignores_the_request_is_cancelled_at_its_timeout(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    started = threading.Event()

    @app.task("job.deaf", timeout=2, max_retry_count=3)
    def deaf(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        time.sleep(2.5)

    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "job.deaf", {})
    await worker_factory(app)
    assert await asyncio.to_thread(started.wait, 10)
    await asyncio.to_thread(cancel, dsn, task_id)
    await wait_until(is_status(dsn, task_id, "CANCELLED"), timeout=10, what="CANCELLED")
    row = status_of(dsn, task_id)
    assert row["retry_count"] == 0


async def test_abort_request_is_heard_without_notify(dsn: str, worker_factory: Any) -> None:
    """With no LISTEN at all, the heartbeat's look-up delivers the request."""
    app = taskq.App(dsn=dsn)
    started = asyncio.Event()

    @app.task("job.slow", timeout=60)
    async def slow(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        await asyncio.sleep(60)

    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "job.slow", {})
    await worker_factory(app, listen=False, heartbeat_interval_seconds=0.3)
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.to_thread(cancel, dsn, task_id)
    await wait_until(is_status(dsn, task_id, "CANCELLED"), timeout=5, what="CANCELLED")


def test_cancel_in_a_rolled_back_transaction_changes_nothing(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "job.any", {})
    with psycopg.connect(dsn) as conn, conn.transaction(force_rollback=True):
        assert app.cancel(conn, task_id) is taskq.Status.CANCELLED
        assert status_of(dsn, task_id)["status"] == "PENDING"  # not committed yet
    assert status_of(dsn, task_id)["status"] == "PENDING"
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.audit")[0]["n"] == 0


async def test_async_cancel_and_children(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        parent = await app.enqueue(conn, "job.parent", {})
        child = await app.enqueue(conn, "job.child", {}, parent_id=parent)
        grandchild = await app.enqueue(conn, "job.child", {}, parent_id=child)
        other = await app.enqueue(conn, "job.child", {})
        async with conn.transaction():
            assert await app.cancel(conn, parent, with_children=True) is taskq.Status.CANCELLED
    statuses = {r["id"]: r["status"] for r in rows(dsn, "SELECT id, status FROM taskq.tasks")}
    assert statuses == {
        parent: "CANCELLED",
        child: "CANCELLED",
        grandchild: "CANCELLED",
        other: "PENDING",
    }


def test_cancelling_a_finished_task_is_refused_with_its_status(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = app.enqueue(conn, "job.any", {})
        live = app.enqueue(conn, "job.any", {})
        conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE id = %s", [done])
    refused = pytest.raises(taskq.InvalidTask, match=rf"{done} \(SUCCESS\)")
    with psycopg.connect(dsn) as conn, refused, conn.transaction():
        app.cancel(conn, live)
        app.cancel(conn, done)
    assert status_of(dsn, live)["status"] == "PENDING"  # all or nothing
    with psycopg.connect(dsn) as conn, pytest.raises(taskq.TaskNotFound, match="no such task"):
        app.cancel(conn, 999999)
    # Cancelling twice is not an error: it says CANCELLED again.
    assert cancel(dsn, live) is taskq.Status.CANCELLED
    assert cancel(dsn, live) is taskq.Status.CANCELLED
