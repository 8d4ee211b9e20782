"""The worker end to end, in process: claim, run, succeed, fail, retry, dead-letter."""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import threading
import time
import zoneinfo
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import taskq
from tests.support import (
    WorkerHandle,
    all_in,
    rows,
    status_of,
    wait_until,
    wakeup_latencies,
)


async def enqueue(dsn: str, app: taskq.App, task_type: str, payload: Any = None, **kw: Any) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return await app.enqueue(conn, task_type, payload, **kw)


async def test_success_path_sets_every_column(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    seen: list[dict[str, Any]] = []

    @app.task("job.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        seen.append(
            {
                "id": ctx.task_id,
                "attempt": ctx.attempt,
                "trace": ctx.trace_id,
                "biz": ctx.biz_id,
                "payload": payload,
                "type": ctx.task_type,
            }
        )
        ctx.progress(50, "half")

    task_id = await enqueue(dsn, app, "job.ok", {"x": 1}, biz_id="b-1", trace_id="trace-1")
    await worker_factory(app)
    await wait_until(all_in(dsn, {"SUCCESS"}), what="SUCCESS")
    row = status_of(dsn, task_id)
    assert seen == [
        {
            "id": task_id,
            "attempt": 0,
            "trace": "trace-1",
            "biz": "b-1",
            "payload": {"x": 1},
            "type": "job.ok",
        }
    ]
    assert row["status"] == "SUCCESS" and row["retry_count"] == 0
    assert row["started_at"] and row["finished_at"] and row["finished_at"] >= row["started_at"]
    assert row["effective_id"] and row["worker_id"]
    assert row["progress"] == {"percent": 50.0, "message": "half"}


async def test_failure_backoff_formula_then_dead_letter_then_requeue(
    dsn: str, worker_factory: Any
) -> None:
    """retry_delay * 2^retry_count + random(0, jitter), on the database clock; with
    max_retry_count=2 the handler runs exactly 3 times, then DEAD_LETTER."""
    app = taskq.App(dsn=dsn)
    runs: list[int] = []

    @app.task("job.fail", max_retry_count=2)
    def fail(ctx: taskq.TaskContext, payload: Any) -> None:
        runs.append(ctx.attempt)
        raise ValueError(f"boom {ctx.attempt}")

    task_id = await enqueue(dsn, app, "job.fail")
    await worker_factory(app)

    await wait_until(lambda: status_of(dsn, task_id)["status"] == "FAILED", what="first failure")
    row = status_of(dsn, task_id)
    delay = (row["next_retry_time"] - row["finished_at"]).total_seconds()
    assert row["retry_count"] == 1 and 60 <= delay <= 90, delay
    assert row["last_error"].startswith("ValueError: boom 0")
    assert "Traceback" in row["last_error"] and "in fail" in row["last_error"]

    # Make the retry due now (ageing the row, as an operator's clock would), run it again.
    rows(
        dsn, "UPDATE taskq.tasks SET next_retry_time = now() WHERE id = %s RETURNING id", (task_id,)
    )
    await wait_until(lambda: status_of(dsn, task_id)["retry_count"] == 2, what="second failure")
    row = status_of(dsn, task_id)
    delay = (row["next_retry_time"] - row["finished_at"]).total_seconds()
    assert row["status"] == "FAILED" and 120 <= delay <= 150, delay

    rows(
        dsn, "UPDATE taskq.tasks SET next_retry_time = now() WHERE id = %s RETURNING id", (task_id,)
    )
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "DEAD_LETTER", what="dead letter")
    row = status_of(dsn, task_id)
    assert runs == [0, 1, 2]
    assert row["retry_count"] == 2 and row["next_retry_time"] is None
    assert row["last_error"].startswith("ValueError: boom 2")

    from taskq.ops import dlq

    moved = dlq.requeue(dsn, dlq.Selection(ids=(task_id,)), note="fixed upstream")
    assert moved == [task_id]
    await wait_until(lambda: len(runs) == 4, what="run after requeue")
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "DEAD_LETTER", what="dead again")
    audit = rows(
        dsn,
        "SELECT action, note, actor, detail->>'by' AS by FROM taskq.audit WHERE task_id = %s",
        (task_id,),
    )
    assert [(a["action"], a["note"]) for a in audit] == [("dlq_requeue", "fixed upstream")]
    # The login acted; the OS user and host the CLI ran as is kept beside it.
    assert audit[0]["actor"] == rows(dsn, "SELECT session_user AS u")[0]["u"]
    assert "@" in audit[0]["by"]


async def test_permanent_and_retry_after(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("job.permanent")
    async def permanent(ctx: taskq.TaskContext, payload: Any) -> None:
        raise taskq.Permanent("account closed")

    @app.task("job.later")
    async def later(ctx: taskq.TaskContext, payload: Any) -> None:
        raise taskq.Retry(after=600)

    p = await enqueue(dsn, app, "job.permanent")
    r = await enqueue(dsn, app, "job.later")
    await worker_factory(app)
    await wait_until(lambda: status_of(dsn, p)["status"] == "DEAD_LETTER", what="permanent")
    await wait_until(lambda: status_of(dsn, r)["status"] == "FAILED", what="retry")
    assert status_of(dsn, p)["retry_count"] == 0
    assert status_of(dsn, p)["last_error"].startswith("Permanent: account closed")
    row = status_of(dsn, r)
    delay = (row["next_retry_time"] - row["finished_at"]).total_seconds()
    assert row["retry_count"] == 1 and 599 <= delay <= 601, delay


async def test_priority_order_with_one_slot(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    order: list[int] = []

    @app.task("job.p")
    async def p(ctx: taskq.TaskContext, payload: Any) -> None:
        order.append(payload["p"])

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for prio in [0, 5, -3, 5, 10, 1]:
            await app.enqueue(conn, "job.p", {"p": prio}, priority=prio)
    await worker_factory(app, queues={"default": 1})
    await wait_until(all_in(dsn, {"SUCCESS"}), what="all done")
    assert order == [10, 5, 5, 1, 0, -3]


@pytest.mark.slow
async def test_listen_wakes_an_idle_worker_fast(dsn: str, worker_factory: Any) -> None:
    """A bare INSERT from any language wakes the worker through the trigger's NOTIFY: median
    commit -> handler start under 50 ms over 20 inserts. The poll is set to 30 s, so only the
    notification can explain a fast start."""
    app = taskq.App(dsn=dsn)
    started: dict[int, float] = {}
    arrived = asyncio.Event()

    @app.task("job.ping")
    async def ping(ctx: taskq.TaskContext, payload: Any) -> None:
        started[payload["n"]] = time.monotonic()
        arrived.set()

    await worker_factory(app, poll_interval_seconds=30)
    latencies = await wakeup_latencies(dsn, started, arrived, count=20)
    median_ms = statistics.median(latencies) * 1000
    print(f"LISTEN wake-up: median {median_ms:.2f} ms, max {max(latencies) * 1000:.2f} ms")
    assert median_ms < 50, f"median wake-up {median_ms:.1f} ms; all: {latencies}"


async def test_unknown_task_type_stays_pending(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("job.known")
    async def known(ctx: taskq.TaskContext, payload: Any) -> None: ...

    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type) VALUES ('job.unknown'), ('job.known') RETURNING id",
    )
    handle = await worker_factory(app)
    await wait_until(all_in(dsn, {"SUCCESS"}, task_type="job.known"), what="known done")
    for _ in range(3):  # several claim rounds pass it by
        handle.worker.claimers["default"].wake()
        await asyncio.sleep(0.05)
    unknown = rows(
        dsn, "SELECT status, retry_count FROM taskq.tasks WHERE task_type = 'job.unknown'"
    )
    assert unknown == [{"status": "PENDING", "retry_count": 0}]
    from taskq.ops import stats

    entry = next(s for s in stats.backlog(dsn) if s.task_type == "job.unknown")
    assert entry.runnable == 1 and entry.oldest_runnable_seconds is not None


async def test_slow_sync_handlers_do_not_block_async_or_other_queues(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    release = threading.Event()
    fast_done = asyncio.Event()
    fast_count = 0

    @app.task("job.blocking", queue="slow")
    def blocking(ctx: taskq.TaskContext, payload: Any) -> None:
        release.wait(20)

    @app.task("job.fast", queue="fast")
    async def fast(ctx: taskq.TaskContext, payload: Any) -> None:
        nonlocal fast_count
        fast_count += 1
        if fast_count == 20:
            fast_done.set()

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "job.blocking"}] * 4)
        await app.enqueue_many(conn, [{"task_type": "job.fast"}] * 20)
    try:
        await worker_factory(app, queues={"slow": 2, "fast": 4})
        await asyncio.wait_for(fast_done.wait(), timeout=10)  # all slow slots are stuck
        blocked = rows(
            dsn,
            "SELECT status, count(*) AS n FROM taskq.tasks"
            " WHERE task_type = 'job.blocking' GROUP BY status ORDER BY status",
        )
        assert blocked == [{"status": "PENDING", "n": 2}, {"status": "PROCESSING", "n": 2}]
    finally:
        release.set()
    await wait_until(all_in(dsn, {"SUCCESS"}), what="everything done")


async def test_async_handler_timeout_fails_the_attempt(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("job.hang", timeout=1)
    async def hang(ctx: taskq.TaskContext, payload: Any) -> None:
        await asyncio.sleep(60)

    task_id = await enqueue(dsn, app, "job.hang")
    await worker_factory(app)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "FAILED", what="timeout")
    assert status_of(dsn, task_id)["last_error"].startswith("TimeoutError: timed out after 1s")


async def test_stale_attempt_cannot_overwrite_a_newer_one(dsn: str) -> None:
    """Fencing at the SQL level: a completion carrying an old token changes nothing."""
    from taskq.db import store
    from taskq.model import TaskOptions

    rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('job.x') RETURNING id")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        [first] = await store.claim_batch(
            conn, queue="default", handlers=[TaskOptions("job.x")], limit=5, worker_id="w1"
        )
        # The attempt is taken away (as the reaper would) and claimed again by someone else.
        await conn.execute("UPDATE taskq.tasks SET status = 'PENDING' WHERE id = %s", (first.id,))
        [second] = await store.claim_batch(
            conn, queue="default", handlers=[TaskOptions("job.x")], limit=5, worker_id="w2"
        )
        assert second.id == first.id and second.effective_id != first.effective_id
        assert await store.mark_success_many(conn, [first.id], [first.effective_id]) == set()
        late = {"ids": [first.id], "tokens": [first.effective_id], "errors": ["late"]}
        failed = await store.mark_failed_many(
            conn,
            **late,
            after_seconds=[None],
            delay_seconds=[1.0],
            jitter_seconds=[0.0],
            counts_for_breaker=[True],
            breaker_threshold=5,
        )
        assert failed == {}
        assert await store.mark_dead_many(conn, **late) == {}
        assert await store.release_many(conn, [first.id], [first.effective_id]) == []
        assert not await store.set_progress(
            conn, task_id=first.id, token=first.effective_id, progress_json='{"percent": 1}'
        )
        row = status_of(dsn, first.id)
        assert row["status"] == "PROCESSING" and row["worker_id"] == "w2"
        assert await store.mark_success_many(conn, [second.id], [second.effective_id]) == {
            second.id
        }
    assert status_of(dsn, first.id)["status"] == "SUCCESS"


@pytest.mark.slow
async def test_graceful_stop_finishes_in_flight_and_claims_nothing_more(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    started = asyncio.Event()

    @app.task("job.slow")
    async def slow(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        await asyncio.sleep(0.5)

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "job.slow"}] * 5)
    handle = await worker_factory(app, queues={"default": 1})
    await asyncio.wait_for(started.wait(), 10)
    await handle.stop()
    counts = {
        r["status"]: r["n"]
        for r in rows(dsn, "SELECT status, count(*) AS n FROM taskq.tasks GROUP BY status")
    }
    assert counts == {"SUCCESS": 1, "PENDING": 4}


@pytest.mark.slow
async def test_shutdown_timeout_releases_without_charging(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    started = asyncio.Event()

    @app.task("job.long")
    async def long(ctx: taskq.TaskContext, payload: Any) -> None:
        started.set()
        await asyncio.sleep(60)

    task_id = await enqueue(dsn, app, "job.long")
    handle = await worker_factory(app, shutdown_timeout_seconds=0.3)
    await asyncio.wait_for(started.wait(), 10)
    await handle.stop()
    row = status_of(dsn, task_id)
    assert row["status"] == "PENDING" and row["retry_count"] == 0 and row["effective_id"] is None


@pytest.mark.parametrize("count", [300])
async def test_many_tasks_each_run_once_in_process(
    dsn: str, worker_factory: Any, count: int
) -> None:
    app = taskq.App(dsn=dsn)
    seen: list[int] = []

    @app.task("job.n")
    async def n(ctx: taskq.TaskContext, payload: Any) -> None:
        seen.append(ctx.task_id)

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "job.n"}] * count)
    await worker_factory(app, queues={"default": 8})
    await wait_until(all_in(dsn, {"SUCCESS"}), what="all done")
    assert len(seen) == count == len(set(seen))


async def test_bare_insert_takes_the_handlers_settings_at_claim(
    dsn: str, worker_factory: Any
) -> None:
    """A writer that does not know the handler (plain SQL, or a producer app that did not
    register the type) leaves max_retry_count / timeout_seconds NULL; the claim fills in the
    settings of the handler that runs it."""
    app = taskq.App(dsn=dsn)

    @app.task("job.configured", max_retry_count=2, timeout=30)
    async def configured(ctx: taskq.TaskContext, payload: Any) -> None:
        assert ctx.max_retry_count == 2

    sql_id = rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('job.configured') RETURNING id")
    producer = taskq.App(dsn=dsn)  # knows nothing about job.configured
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        py_id = await producer.enqueue(conn, "job.configured")
    before = status_of(dsn, py_id)
    assert before["max_retry_count"] is None and before["timeout_seconds"] is None
    await worker_factory(app)
    await wait_until(all_in(dsn, {"SUCCESS"}), what="done")
    for task_id in (sql_id[0]["id"], py_id):
        row = status_of(dsn, task_id)
        assert (row["max_retry_count"], row["timeout_seconds"]) == (2, 30)


async def test_a_utc_alias_session_is_set_to_plain_utc(dsn: str) -> None:
    """A server whose TimeZone is 'Etc/UTC' (Debian's and the Docker image's default) gives the
    worker's connections plain 'UTC': the same zone, which psycopg loads without zoneinfo. A
    session in another zone is left alone."""
    seen: dict[str, tuple[str, Any]] = {}
    app = taskq.App(dsn=dsn)

    @app.task("tz.show", idempotent=True)
    async def show(ctx: taskq.TaskContext, payload: Any) -> None:
        zone = await (await ctx.aconn.execute("SHOW TimeZone")).fetchone()
        now = await (await ctx.aconn.execute("SELECT now()")).fetchone()
        assert zone is not None and now is not None
        seen[payload["zone"]] = (zone[0], now[0].tzinfo)

    for zone in ("Etc/UTC", "Europe/Paris"):
        zoned = make_conninfo(dsn, options=f"-c TimeZone={zone}")
        async with await psycopg.AsyncConnection.connect(zoned) as conn:
            await app.enqueue(conn, "tz.show", {"zone": zone}, biz_id=zone)
        worker = WorkerHandle(
            taskq.Worker(app, dsn=zoned, settings=taskq.WorkerSettings(poll_interval_seconds=0.5))
        )
        await worker.start()
        try:
            await wait_until(lambda z=zone: z in seen)
        finally:
            await worker.stop()
    assert seen["Etc/UTC"] == ("UTC", dt.UTC)
    assert seen["Europe/Paris"][0] == "Europe/Paris"
    assert seen["Europe/Paris"][1] == zoneinfo.ZoneInfo("Europe/Paris")
