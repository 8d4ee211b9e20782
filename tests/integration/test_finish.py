"""How attempts end, in process against a real database: the completer as the one writer,
releases, lost claim replies, dead pooled connections, outcome metrics, breaker healing."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import rows, status_of, wait_until


async def enqueue(dsn: str, app: taskq.App, task_type: str, payload: Any = None, **kw: Any) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return await app.enqueue(conn, task_type, payload, **kw)


def finished(worker: taskq.Worker, task_type: str, outcome: str, queue: str = "default") -> float:
    value = worker.metrics.registry.get_sample_value(
        "taskq_tasks_finished_total",
        {"queue": queue, "task_type": task_type, "outcome": outcome},
    )
    return value or 0.0


async def test_an_idempotent_success_heals_the_breaker(dsn: str, worker_factory: Any) -> None:
    """The idempotent commit is the batched success statement: consecutive failures reset."""
    app = taskq.App(dsn=dsn)

    @app.task("pts.add", idempotent=True)
    def add(ctx: taskq.TaskContext, payload: Any) -> None:
        ctx.conn.execute("SELECT 1")

    @app.task("pts.aadd", idempotent=True)
    async def aadd(ctx: taskq.TaskContext, payload: Any) -> None:
        await ctx.aconn.execute("SELECT 1")

    rows(
        dsn,
        "INSERT INTO taskq.breakers (task_type, consecutive_failures, last_failure_at)"
        " VALUES ('pts.add', 3, now()), ('pts.aadd', 3, now()) RETURNING task_type",
    )
    ids = [
        await enqueue(dsn, app, "pts.add", biz_id="a-1"),
        await enqueue(dsn, app, "pts.aadd", biz_id="b-1"),
    ]
    await worker_factory(app)
    for task_id in ids:
        await wait_until(lambda t=task_id: status_of(dsn, t)["status"] == "SUCCESS")
    breakers = rows(dsn, "SELECT task_type, consecutive_failures, state FROM taskq.breakers")
    assert {(b["task_type"], b["consecutive_failures"], b["state"]) for b in breakers} == {
        ("pts.add", 0, "CLOSED"),
        ("pts.aadd", 0, "CLOSED"),
    }


async def test_a_retry_exhausted_dead_letter_is_counted_as_dead_lettered(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("job.boom", max_retry_count=0)
    async def boom(ctx: taskq.TaskContext, payload: Any) -> None:
        raise RuntimeError("boom")

    @app.task("job.flaky", max_retry_count=3, retry_delay=60)
    async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
        raise RuntimeError("flaky")

    dead = await enqueue(dsn, app, "job.boom")
    retried = await enqueue(dsn, app, "job.flaky")
    handle = await worker_factory(app)
    await wait_until(lambda: status_of(dsn, dead)["status"] == "DEAD_LETTER")
    await wait_until(lambda: status_of(dsn, retried)["status"] == "FAILED")
    await wait_until(lambda: finished(handle.worker, "job.flaky", "failure") == 1)
    assert finished(handle.worker, "job.boom", "dead_lettered") == 1
    assert finished(handle.worker, "job.boom", "failure") == 0


async def test_a_stray_claim_is_released_at_the_next_heartbeat(
    dsn: str, worker_factory: Any
) -> None:
    """A claim that committed but whose reply was lost leaves a row PROCESSING under a live
    worker that does not run it: the heartbeat finds it and it is given back, uncharged."""
    app = taskq.App(dsn=dsn)
    ran: list[int] = []

    @app.task("job.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.append(ctx.task_id)

    handle = await worker_factory(app, heartbeat_interval_seconds=0.2, poll_interval_seconds=30)
    [row] = rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status, worker_id, effective_id, started_at)"
        " VALUES ('job.ok', 'PROCESSING', %s, gen_random_uuid(), now()) RETURNING id",
        (handle.worker.worker_id,),
    )
    await wait_until(lambda: status_of(dsn, row["id"])["status"] == "SUCCESS", timeout=10)
    assert ran == [row["id"]] and status_of(dsn, row["id"])["retry_count"] == 0


async def test_a_stray_report_older_than_the_write_is_ignored(
    dsn: str, worker_factory: Any
) -> None:
    """A heartbeat that looked while an attempt had ended here but was not yet written reports
    it as a stray; by the time the report reaches the event loop the completer has written it.
    It must not be queued again (a queued stray at shutdown kept the worker from unregistering)."""
    app = taskq.App(dsn=dsn)

    @app.task("job.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    task_id = await enqueue(dsn, app, "job.ok")
    handle = await worker_factory(app, heartbeat_interval_seconds=30, poll_interval_seconds=30)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS")
    [row] = rows(dsn, "SELECT effective_id FROM taskq.tasks WHERE id = %s", (task_id,))
    worker = handle.worker
    await wait_until(lambda: not any(c.claiming for c in worker.claimers.values()))
    worker._strays([(task_id, row["effective_id"])])
    assert worker._completer.pending == 0


async def test_a_running_attempt_is_never_a_stray(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    started = asyncio.Event()
    release = asyncio.Event()

    @app.task("job.slow")
    async def slow(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        await release.wait()

    task_id = await enqueue(dsn, app, "job.slow")
    handle = await worker_factory(app, heartbeat_interval_seconds=0.1)
    await asyncio.wait_for(started.wait(), 10)

    def beat_at() -> Any:
        found = rows(
            dsn, "SELECT heartbeat_at FROM taskq.workers WHERE id = %s", (handle.worker.worker_id,)
        )
        return found[0]["heartbeat_at"]

    first = beat_at()
    # Several heartbeats (every 0.1 s) have compared what the worker holds with what it runs.
    await wait_until(lambda: (beat_at() - first).total_seconds() >= 0.5, what="heartbeats")
    assert status_of(dsn, task_id)["status"] == "PROCESSING"
    release.set()
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS")
    assert status_of(dsn, task_id)["retry_count"] == 0


async def test_dead_pooled_connections_are_never_handed_to_handlers(
    dsn: str, worker_factory: Any
) -> None:
    """After pg_terminate_backend (or a restart, a failover), both pools check connections at
    checkout: the next handlers get live ones and nobody is charged."""
    app = taskq.App(dsn=dsn)

    @app.task("job.sync_db")
    def sync_db(ctx: taskq.TaskContext, payload: Any) -> None:
        with ctx.connection() as conn:
            conn.execute("SELECT 1")

    @app.task("job.async_db")
    async def async_db(ctx: taskq.TaskContext, payload: Any) -> None:
        async with ctx.aconnection() as conn:
            await conn.execute("SELECT 1")

    @app.task("pts.sync", idempotent=True)
    def pts_sync(ctx: taskq.TaskContext, payload: Any) -> None:
        ctx.conn.execute("SELECT 1")

    types = ["job.sync_db", "job.async_db", "pts.sync"]
    handle = await worker_factory(app, queues={"default": 4})
    warm = [await enqueue(dsn, app, t, biz_id=f"warm-{t}") for t in types * 2]
    for task_id in warm:
        await wait_until(lambda t=task_id: status_of(dsn, t)["status"] == "SUCCESS")
    terminated = rows(
        dsn,
        "SELECT pg_terminate_backend(pid) AS ok, pid FROM pg_stat_activity"
        " WHERE datname = current_database()"
        " AND (application_name LIKE 'taskq-handler-%%'"
        " OR application_name LIKE 'taskq-worker-%%')",
    )
    assert terminated and all(r["ok"] for r in terminated)
    pids = [r["pid"] for r in terminated]
    await wait_until(
        lambda: not rows(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)),
        what="backends gone",
    )
    after = [await enqueue(dsn, app, t, biz_id=f"after-{t}-{n}") for t in types for n in range(3)]
    for task_id in after:
        await wait_until(lambda t=task_id: status_of(dsn, t)["status"] == "SUCCESS")
    charged = rows(dsn, "SELECT id, last_error FROM taskq.tasks WHERE retry_count > 0")
    assert charged == []
    for task_type in types:
        assert finished(handle.worker, task_type, "failure") == 0
        assert finished(handle.worker, task_type, "released") == 0


async def test_a_shutdown_release_wakes_another_worker_at_once(
    dsn: str, worker_factory: Any
) -> None:
    """The release NOTIFYs: the other worker, which polls only every 30 s, claims it now.
    And the shutdown leaves no 'exception was never retrieved' behind."""
    first_app = taskq.App(dsn=dsn)
    started = asyncio.Event()

    @first_app.task("job.long")
    async def long_first(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        await asyncio.sleep(60)

    second_app = taskq.App(dsn=dsn)
    picked_up = asyncio.Event()

    @second_app.task("job.long")
    async def long_second(ctx: taskq.TaskContext, payload: Any) -> None:
        picked_up.set()

    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        task_id = await enqueue(dsn, first_app, "job.long")
        first = await worker_factory(first_app, shutdown_timeout_seconds=0.2)
        await asyncio.wait_for(started.wait(), 10)
        await worker_factory(second_app, poll_interval_seconds=30)
        stopped_at = time.monotonic()
        await first.stop()
        await asyncio.wait_for(picked_up.wait(), 5)
        assert time.monotonic() - stopped_at < 5
        await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS")
        assert status_of(dsn, task_id)["retry_count"] == 0
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert not [e for e in errors if "never retrieved" in str(e.get("message"))], errors


async def test_the_completer_waits_for_the_claims_of_every_claimer_of_its_process(
    dsn: str, worker_factory: Any
) -> None:
    """One ClaimsInFlight per process (taskq/worker/inflight.py), shared by the completer and
    every queue's claimer: a batch waits for whichever claim is out."""
    app = taskq.App(dsn=dsn)

    @app.task("job.a", queue="a")
    async def a(ctx: taskq.TaskContext, payload: Any) -> None:
        return None

    @app.task("job.b", queue="b")
    async def b(ctx: taskq.TaskContext, payload: Any) -> None:
        return None

    handle = await worker_factory(app, queues={"a": 2, "b": 2})
    completer = handle.worker._completer
    assert completer is not None
    shared = completer._claims_in_flight
    assert shared is not None
    assert [c._claims_in_flight is shared for c in handle.worker.claimers.values()] == [True] * 2


@pytest.mark.parametrize("capacity", [2])
async def test_claimers_wait_while_the_completer_is_behind(
    dsn: str, worker_factory: Any, capacity: int, monkeypatch: Any
) -> None:
    """The completer's queue is bounded: at capacity the claimers claim nothing more."""
    from taskq.worker import worker as worker_module

    monkeypatch.setattr(worker_module, "COMPLETER_SLOTS_FACTOR", 1)
    app = taskq.App(dsn=dsn)

    @app.task("job.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        return None

    handle = await worker_factory(app, queues={"default": capacity})
    completer = handle.worker._completer
    assert completer is not None and completer.capacity == capacity
    completer.room.clear()  # as if `capacity` outcomes were waiting
    # A claim round already past its room check when the room closed (the one every worker
    # runs at start, on a slow machine) may still be out: its claim function takes a fresh
    # snapshot per statement and would see the tasks below. Wait for it to come back.
    async with handle.worker.claimers["default"].round:
        pass
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "job.ok"}] * 5)
    await asyncio.sleep(1.0)  # several poll intervals: no claim may happen meanwhile
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'PENDING'")[0]["n"] == 5
    completer.room.set()
    handle.worker.claimers["default"].wake()
    await wait_until(
        lambda: (
            rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'SUCCESS'")[0]["n"] == 5
        )
    )
