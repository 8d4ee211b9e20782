"""One ``run_once`` test per worker service, each against a real database and without starting
a worker: the elector, the leader-gated maintenance (reaper, scheduler, gauges, prune), the
control watcher, the heartbeat, the notifier, the claimer and the completer. And a NOTIFY
flood against a running worker: claim rounds stay bounded."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import taskq
from taskq.control.state import ControlWatcher
from taskq.db import store
from taskq.db.connection import _maybe_gone
from taskq.model import ClaimedTask
from taskq.ops import health, prune, stats, switches
from taskq.outcome import Outcome
from taskq.service import Every
from taskq.worker.claimer import COALESCE_BURST, Claimer
from taskq.worker.completer import Completer
from taskq.worker.executor import Executor
from taskq.worker.heartbeat import Heartbeat
from taskq.worker.leader import Elector
from taskq.worker.memory import EXIT_MEMORY
from taskq.worker.metrics import GaugeRefresher, Metrics
from taskq.worker.notifier import TASKS_CHANNEL, Notifier
from taskq.worker.reaper import Reaper
from taskq.worker.runtime import WorkerRuntime
from taskq.worker.scheduler import Scheduler
from tests.support import count, execute, rows, wait_until


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=4, kwargs={"autocommit": True}) as p:
        yield p


class Leader:
    """A leader gate that is always open (the elector has its own test)."""

    def __init__(self) -> None:
        self.is_leader = True
        self.elected = asyncio.Event()
        self.elected.set()


def pending(dsn: str, n: int, task_type: str = "svc.job", queue: str = "default") -> None:
    execute(
        dsn,
        f"INSERT INTO taskq.tasks (task_type, queue, payload) "
        f"SELECT '{task_type}', '{queue}', jsonb_build_object('n', i) "
        f"FROM generate_series(1, {n}) AS i",
    )


async def claim(pool: AsyncConnectionPool[Any], app: taskq.App, n: int) -> list[ClaimedTask]:
    async with pool.connection() as conn:
        return await store.claim_batch(
            conn,
            queue="default",
            handlers=[t.options for t in app.tasks.values()],
            limit=n,
            worker_id="w-test",
        )


def job_app(dsn: str) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("svc.job")
    async def job(ctx: taskq.TaskContext, payload: Any) -> None: ...

    return app


# --- leadership ------------------------------------------------------------------------------


async def test_elector_one_leader_and_hand_over(pool: AsyncConnectionPool[Any]) -> None:
    a = Elector(pool, worker_id="a", ttl_seconds=30)
    b = Elector(pool, worker_id="b", ttl_seconds=30)
    assert await a.run_once() is True and a.elected.is_set()
    assert await b.run_once() is False and not b.elected.is_set()
    assert await a.run_once() is True  # renewal
    await a.resign()
    assert not a.is_leader and not a.elected.is_set()
    assert await b.run_once() is True and b.is_leader


async def test_elector_steps_down_when_it_cannot_know(pool: AsyncConnectionPool[Any]) -> None:
    elector = Elector(pool, worker_id="a")
    assert await elector.run_once()
    await pool.close()
    with pytest.raises(psycopg.Error):
        await elector.run_once()
    assert not elector.is_leader and not elector.elected.is_set()


# --- maintenance (leader-gated) --------------------------------------------------------------


async def test_reaper_run_once_rescues_dead_attempts_only(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    execute(
        dsn,
        "INSERT INTO taskq.workers (id, host, pid, version, lease_seconds) "
        "VALUES ('alive', 'h', 1, 't', 60);"
        "INSERT INTO taskq.tasks (task_type, status, started_at, effective_id, worker_id, "
        "  max_retry_count, timeout_seconds) VALUES "
        "('svc.job', 'PROCESSING', now() - interval '1 hour', gen_random_uuid(), 'ghost', 5, 7200),"
        "('svc.job', 'PROCESSING', now(), gen_random_uuid(), 'alive', 5, 7200)",
    )
    reaper = Reaper(
        pool, interval_seconds=5, grace_seconds=10, orphan_after_seconds=30, leader=Leader()
    )
    result = await reaper.run_once()
    assert [r["worker_id"] for r in result.rescued] == ["ghost"]
    got = rows(dsn, "SELECT worker_id, status, retry_count FROM taskq.tasks ORDER BY id")
    assert [(r["status"], r["retry_count"]) for r in got] == [("FAILED", 1), ("PROCESSING", 0)]
    assert (await reaper.run_once()).rescued == []  # nothing left to rescue


async def test_scheduler_run_once_fires_no_burst_and_counts_ticks(dsn: str) -> None:
    """catch_up=skip after 56 s without a scheduler: 11 ticks of an every-5s schedule are due,
    all within the misfire grace. One fires; ten are recorded missed; the metrics say so."""
    app = taskq.App(dsn=dsn)

    @app.periodic("every 5s", task_type="svc.tick", catch_up="skip")
    async def tick(ctx: taskq.TaskContext, payload: Any) -> None: ...

    metrics = Metrics()
    scheduler = Scheduler(app, dsn, leader=Leader(), metrics=metrics)
    try:
        assert [f.enqueued for f in await scheduler.run_once()] == [[]]  # first sight
        execute(
            dsn,
            "UPDATE taskq.schedules SET since = to_timestamp(floor(extract(epoch FROM now()) / 5)"
            " * 5 - 55) - interval '0.5 s'",
        )
        [fired] = await scheduler.run_once()
    finally:
        scheduler.close()
    assert len(fired.enqueued) == 1 and fired.missed >= 10
    assert count(dsn, "task_type = 'svc.tick'") == 1
    assert scheduler.delay_after([fired]) <= 5.1
    sample = metrics.registry.get_sample_value
    assert (
        sample("taskq_schedule_ticks_total", {"schedule": "svc.tick@every 5s", "outcome": "fired"})
        == 1
    )
    assert (
        sample("taskq_schedule_ticks_total", {"schedule": "svc.tick@every 5s", "outcome": "missed"})
        == fired.missed
    )
    assert sample("taskq_schedule_delay_seconds_count", {"schedule": "svc.tick@every 5s"}) == 1


async def test_scheduler_counts_late_ticks(dsn: str) -> None:
    """run_once after three days down: the newest daily tick (hours old) runs late."""
    app = taskq.App(dsn=dsn)

    @app.periodic("every 1d", task_type="svc.daily", catch_up="run_once")
    async def daily(ctx: taskq.TaskContext, payload: Any) -> None: ...

    metrics = Metrics()
    scheduler = Scheduler(app, dsn, leader=Leader(), metrics=metrics)
    try:
        await scheduler.run_once()
        execute(dsn, "UPDATE taskq.schedules SET since = now() - interval '3 days 1 hour'")
        [fired] = await scheduler.run_once()
    finally:
        scheduler.close()
    name = "svc.daily@every 1d"
    if fired.delays and fired.delays[0] <= 60:
        pytest.skip("ran within a minute after midnight UTC: the newest tick is on time")
    assert len(fired.enqueued) == 1 and fired.late == 1
    sample = metrics.registry.get_sample_value
    assert sample("taskq_schedule_ticks_total", {"schedule": name, "outcome": "late"}) == 1
    assert sample("taskq_schedule_ticks_total", {"schedule": name, "outcome": "missed"}) >= 2


async def test_gauges_run_once_on_the_leader_and_clear_on_a_follower(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    pending(dsn, 3)
    metrics = Metrics()
    control = ControlWatcher(pool)
    gate = Leader()
    gauges = GaugeRefresher(pool, metrics, gate, control)
    assert await gauges.run_once() is True
    sample = metrics.registry.get_sample_value
    labels = {"queue": "default", "task_type": "svc.job", "state": "runnable"}
    assert sample("taskq_backlog_tasks", labels) == 3 and sample("taskq_leader") == 1
    await gauges.on_follower()
    assert sample("taskq_backlog_tasks", labels) is None and sample("taskq_leader") == 0


async def test_a_slow_backlog_count_waits_while_the_other_gauges_refresh(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """The count takes at most MAX_SHARE of the time; the flow and health gauges, which
    operators alert on, are read on every refresh all the same."""
    pending(dsn, 3)
    metrics = Metrics()
    gauges = GaugeRefresher(pool, metrics, Leader(), ControlWatcher(pool))
    gauges.MAX_SHARE = 1e-9  # any count "took" far more than its share: the next one waits
    sample = metrics.registry.get_sample_value
    labels = {"queue": "default", "task_type": "svc.job", "state": "runnable"}
    assert await gauges.run_once() is True
    assert sample("taskq_backlog_tasks", labels) == 3
    pending(dsn, 2)
    execute(dsn, "INSERT INTO taskq.flow_limits (task_type, max_running) VALUES ('svc.job', 7)")
    assert await gauges.run_once() is False
    assert sample("taskq_backlog_tasks", labels) == 3  # not counted again yet
    # ... while the flow limits are read all the same
    assert sample("taskq_flow_max_running_tasks", {"task_type": "svc.job"}) == 7
    # A worker that becomes the leader again counts at once: its gauges were cleared.
    await gauges.on_follower()
    assert await gauges.run_once() is True
    assert sample("taskq_backlog_tasks", labels) == 5


async def test_prune_run_once_deletes_old_successes(dsn: str) -> None:
    execute(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status, finished_at) VALUES "
        "('svc.job', 'SUCCESS', now() - interval '2 hours'), ('svc.job', 'SUCCESS', now())",
    )
    pruner = Every(
        "prune",
        lambda: asyncio.to_thread(prune.prune, dsn, older_than_seconds=3600),
        interval_seconds=600,
        leader=Leader(),
    )
    await pruner.run_once()
    assert count(dsn) == 1


# --- every worker ----------------------------------------------------------------------------


async def test_control_watcher_run_once_sees_a_pause(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    changes: list[int] = []
    control = ControlWatcher(pool, on_change=lambda: changes.append(1))
    assert not (await control.run_once()).paused_queues and changes == []
    switches.pause(dsn, kind="queue", name="sms")
    state = await control.run_once()
    assert state.paused_queues == {"sms"} and changes == [1]
    await control.run_once()
    assert changes == [1]  # no change, no wake-up


def test_heartbeat_run_once_registers_and_finds_lost_attempts(dsn: str) -> None:
    execute(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status, started_at, effective_id, worker_id) "
        "VALUES ('svc.job', 'PROCESSING', now(), '00000000-0000-0000-0000-000000000001', 'hb')",
    )
    [task] = rows(dsn, "SELECT id, effective_id FROM taskq.tasks")
    held = [(task["id"], task["effective_id"]), (task["id"] + 1000, uuid.uuid4())]
    lost: list[list[int]] = []
    heartbeat = Heartbeat(
        dsn,
        worker_id="hb",
        queues={"default": 1},
        interval_seconds=10,
        lease_seconds=30,
        held=lambda: held,
        on_lost=lost.append,
        loop_silence=lambda: 0.0,
    )
    try:
        assert heartbeat.run_once() == [task["id"] + 1000]
        assert lost == [[task["id"] + 1000]]
        assert count_workers(dsn) == 1
    finally:
        heartbeat.stop(unregister=True)
    assert count_workers(dsn) == 0


def count_workers(dsn: str) -> int:
    return len(rows(dsn, "SELECT id FROM taskq.workers"))


async def test_notifier_run_once_listens_until_the_connection_drops(dsn: str) -> None:
    heard: list[str | None] = []
    arrived = asyncio.Event()

    def on_tasks(payload: str | None) -> None:
        heard.append(payload)
        arrived.set()

    notifier = Notifier(dsn, {TASKS_CHANNEL: on_tasks})
    session = asyncio.create_task(notifier.run_once())
    await asyncio.wait_for(notifier.connected.wait(), 10)
    assert heard == [None]  # connected: look everywhere once
    arrived.clear()
    execute(dsn, "NOTIFY taskq_tasks, '[\"default\"]'")
    await asyncio.wait_for(arrived.wait(), 10)
    assert heard == [None, '["default"]']
    execute(
        dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE '%listen%' AND pid <> pg_backend_pid()",
    )
    with pytest.raises(psycopg.Error):
        await asyncio.wait_for(session, 10)
    assert not notifier.connected.is_set() and notifier.sessions == 1


async def test_notifier_lets_a_task_it_woke_run_before_the_next_notification(dsn: str) -> None:
    """Notifications of one transaction arrive together. After a listener that woke a waiting
    task (it says so: True), that task runs before the next notification is handed out, so
    at idle the claimer sends its claim before the notifier waits on its socket again; after a
    listener that woke nothing (False) the notifier reads on."""
    order: list[str] = []
    woken = asyncio.Event()
    heard_last = asyncio.Event()

    async def waiting_task() -> None:
        while True:
            await woken.wait()
            woken.clear()
            order.append("the woken task ran")

    def on_tasks(payload: str | None) -> bool:
        if payload is None:
            return False
        order.append(payload)
        if payload == "last":
            heard_last.set()
        if payload.startswith("wake"):
            woken.set()
            return True
        return False

    notifier = Notifier(dsn, {TASKS_CHANNEL: on_tasks})
    session = asyncio.create_task(notifier.run_once())
    waiter = asyncio.create_task(waiting_task())
    try:
        await asyncio.wait_for(notifier.connected.wait(), 10)
        execute(
            dsn,
            "DO $$ BEGIN PERFORM pg_notify('taskq_tasks', 'wake 1'); "
            "PERFORM pg_notify('taskq_tasks', 'quiet'); "
            "PERFORM pg_notify('taskq_tasks', 'wake 2'); "
            "PERFORM pg_notify('taskq_tasks', 'last'); END $$",
        )
        await asyncio.wait_for(heard_last.wait(), 10)
    finally:
        session.cancel()
        waiter.cancel()
        await asyncio.gather(session, waiter, return_exceptions=True)
    ran = "the woken task ran"
    assert order == ["wake 1", ran, "quiet", "wake 2", ran, "last"]


async def test_completer_run_once_writes_a_batch(dsn: str, pool: AsyncConnectionPool[Any]) -> None:
    app = job_app(dsn)
    pending(dsn, 3)
    claimed = await claim(pool, app, 3)
    completer = Completer(pool, app.options_for, worker_id="w-test")
    for task in claimed[:2]:
        completer.put(Outcome.success(task, 0.01))
    completer.put(Outcome.failure(claimed[2], 0.01, RuntimeError("boom")))
    assert await completer.run_once() == 3
    assert completer.pending == 0
    got = rows(dsn, "SELECT status, count(*) AS n FROM taskq.tasks GROUP BY 1 ORDER BY 1")
    assert [(r["status"], r["n"]) for r in got] == [("FAILED", 1), ("SUCCESS", 2)]


async def claimer_for(
    dsn: str,
    pool: AsyncConnectionPool[Any],
    app: taskq.App,
    slots: int,
    control: ControlWatcher,
    **options: Any,
) -> tuple[Claimer, list[Outcome], ThreadPoolExecutor, WorkerRuntime]:
    reported: list[Outcome] = []
    threads = ThreadPoolExecutor(max_workers=slots)
    runtime = WorkerRuntime(app, pool, dsn=dsn, sync_max_size=slots)
    claimer = Claimer(
        queue="default",
        slots=slots,
        handlers=[t.options for t in app.tasks.values()],
        pool=pool,
        executor=Executor(runtime, worker_id="w-test", threads=threads),
        report=reported.append,
        worker_id="w-test",
        control=control,
        metrics=Metrics(),
        **{"poll_interval_seconds": 1, **options},
    )
    return claimer, reported, threads, runtime


async def test_claimer_run_once_claims_at_most_its_free_slots(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    app = job_app(dsn)
    pending(dsn, 5)
    control = ControlWatcher(pool)
    claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 3, control)
    try:
        claimed = await claimer.run_once()
        assert len(claimed) == 3 and claimer.in_flight == 3
        await claimer.wait_attempts()
        assert sorted(o.kind.value for o in reported) == ["success"] * 3
        assert claimer.in_flight == 0 and claimer.claims == 1
        switches.pause(dsn, kind="queue", name="default")
        await control.run_once()
        assert await claimer.run_once() == []
        await claimer.wait_attempts()
        assert claimer.claims == 1  # paused: no claim statement at all
    finally:
        threads.shutdown()
        runtime.close()
    assert count(dsn, "status = 'PROCESSING'") == 3  # nobody completed them: no completer here


async def test_claimer_claims_through_claim_few_after_a_short_round(
    dsn: str, pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first round and every round after a short one expect few rows (claim_few, one
    scan at idle); a round after a full one is a drain's (claim_batch's lanes and floors)."""
    app = job_app(dsn)
    pending(dsn, 5)
    asked: list[bool] = []
    claim_batch = store.claim_batch

    async def spy(conn: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["few"])
        return await claim_batch(conn, **kwargs)

    monkeypatch.setattr(store, "claim_batch", spy)
    claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 3, ControlWatcher(pool))
    try:
        assert len(await claimer.run_once()) == 3  # first round: few, found the batch full
        await claimer.wait_attempts()
        assert len(await claimer.run_once()) == 2  # after a full round: the full claim, short
        await claimer.wait_attempts()
        pending(dsn, 1)
        assert len(await claimer.run_once()) == 1  # after a short round: few again
        await claimer.wait_attempts()
    finally:
        threads.shutdown()
        runtime.close()
    assert asked == [True, False, True]
    assert len(reported) == 6


async def test_claimer_keeps_one_claim_cursor_for_its_kept_connection(
    dsn: str, pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cursor for the one-row claims of an idle worker on its kept connection (psycopg then
    keeps what it looked up for the statement). A claim of more rows closes it (it would keep
    their payloads until the next claim), and when the server ends the connection the next
    round claims on another, each with a cursor of its own."""
    app = job_app(dsn)
    made: list[Any] = []
    claim_cursor = store.claim_cursor

    def spy(conn: Any) -> Any:
        made.append(conn)
        return claim_cursor(conn)

    async def claim_round(expected: int) -> None:
        pending(dsn, expected)
        assert len(await claimer.run_once()) == expected
        await claimer.wait_attempts()

    monkeypatch.setattr(store, "claim_cursor", spy)
    claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 3, ControlWatcher(pool))
    try:
        await claim_round(1)
        await claim_round(1)
        assert len(made) == 1
        await claim_round(2)  # on the same cursor, which it then closes
        assert len(made) == 1
        await claim_round(1)
        assert len(made) == 2 and made[1] is made[0]  # a new cursor, the same connection
        execute(dsn, f"SELECT pg_terminate_backend({made[0].info.backend_pid})")
        # The server's goodbye has reached the idle socket (what the kept connection checks).
        await wait_until(lambda: _maybe_gone(made[0]), timeout=10, what="the goodbye")
        await claim_round(1)
    finally:
        threads.shutdown()
        runtime.close()
    assert len(made) == 3 and made[2] is not made[0]
    assert len(reported) == 6


async def test_claimer_starts_the_attempts_before_it_counts_them(
    dsn: str, pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim's metrics wait until the attempts have taken their first step: at idle the
    handler of the task whose NOTIFY woke the claimer starts before that bookkeeping."""
    app = taskq.App(dsn=dsn)
    started: list[int] = []

    @app.task("svc.job")
    async def job(ctx: taskq.TaskContext, payload: Any) -> None:
        started.append(ctx.task_id)

    pending(dsn, 3)
    control = ControlWatcher(pool)
    claimer, _reported, threads, runtime = await claimer_for(dsn, pool, app, 3, control)
    seen_at_count: list[int] = []
    claimed_many = claimer._metrics.claimed_many

    def spy(tasks: Any) -> None:
        seen_at_count.append(len(started))
        claimed_many(tasks)

    monkeypatch.setattr(claimer._metrics, "claimed_many", spy)
    try:
        assert len(await claimer.run_once()) == 3
        await claimer.wait_attempts()
    finally:
        threads.shutdown()
        runtime.close()
    assert seen_at_count == [3]


async def test_claimer_wake_says_whether_it_changed_anything(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """The notifier gives way to a claimer only when its wake-up did something."""
    claimer, _reported, threads, runtime = await claimer_for(
        dsn, pool, job_app(dsn), 1, ControlWatcher(pool)
    )
    try:
        assert claimer.wake() is False  # a new claimer claims at once: already woken
        assert await claimer.run_once() == []  # a round takes the wake-up
        assert claimer.wake() is True
        assert claimer.wake() is False
    finally:
        threads.shutdown()
        runtime.close()


async def test_an_idle_half_open_type_is_not_looked_for_on_every_claim_round(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """A HALF_OPEN type with no task, beside a backlog of another type in the same queue:
    looking for its probe reads that whole backlog (the claim index is by queue), so the
    claimer looks once, gives the probe back, and not again on the following rounds; another
    worker does not look either, until the empty probe is ``empty_probe_wait`` old. A round
    that looks keeps a slot for the probe; left unused, it goes to the next round's batch."""
    app = job_app(dsn)

    @app.task("svc.partner")
    async def partner(ctx: taskq.TaskContext, payload: Any) -> None: ...

    pending(dsn, 40)
    execute(
        dsn, "INSERT INTO taskq.breakers (task_type, state) VALUES ('svc.partner', 'HALF_OPEN')"
    )
    control = ControlWatcher(pool)
    await control.run_once()
    claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 4, control)
    other, _, other_threads, other_runtime = await claimer_for(dsn, pool, app, 4, control)
    try:
        for expected in (3, 4, 4, 4, 4):
            assert len(await claimer.run_once()) == expected
            assert claimer._wake.is_set()  # its batch was full: claim again at once
            await claimer.wait_attempts()
        assert claimer.claims == 5 and claimer.probe_tries == 1
        [b] = rows(dsn, "SELECT probe_worker, probed_empty_at FROM taskq.breakers")
        assert b["probe_worker"] is None and b["probed_empty_at"] is not None
        assert len(await other.run_once()) == 3  # another worker: refused by the database
        await other.wait_attempts()
        assert other.probe_tries == 1
        [after] = rows(dsn, "SELECT probed_empty_at FROM taskq.breakers")
        assert after["probed_empty_at"] == b["probed_empty_at"]  # it did not look
        pending(dsn, 1, task_type="svc.partner")
        execute(dsn, "UPDATE taskq.breakers SET probed_empty_at = now() - interval '6 s'")
        other._probe_quiet.clear()  # its poll interval has passed
        got = await other.run_once()
        await other.wait_attempts()
        assert other.probe_tries == 2
        assert sorted(t.task_type for t in got) == ["svc.job"] * 3 + ["svc.partner"]
    finally:
        for pool_threads, rt in ((threads, runtime), (other_threads, other_runtime)):
            pool_threads.shutdown()
            rt.close()
    assert len(reported) == 19


async def test_a_probe_round_starts_its_batch_before_it_looks_for_the_probe(
    dsn: str, pool: AsyncConnectionPool[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A HALF_OPEN type with nothing to probe must not delay the tasks of the others: the
    batch's attempts are started, and run, while the probe's statements are out."""
    app = taskq.App(dsn=dsn)
    started: list[str] = []

    @app.task("svc.job")
    async def job(ctx: taskq.TaskContext, payload: Any) -> None:
        started.append(ctx.task_type)

    @app.task("svc.partner")
    async def partner(ctx: taskq.TaskContext, payload: Any) -> None:
        started.append(ctx.task_type)

    pending(dsn, 2)
    pending(dsn, 1, task_type="svc.partner")
    execute(
        dsn, "INSERT INTO taskq.breakers (task_type, state) VALUES ('svc.partner', 'HALF_OPEN')"
    )
    control = ControlWatcher(pool)
    await control.run_once()
    claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 4, control)
    take_probe = store.breaker_take_probe
    seen: list[tuple[int, list[str]]] = []

    async def spy(conn: Any, **kwargs: Any) -> bool:
        in_flight = len(claimer._in_flight)
        won = await take_probe(conn, **kwargs)
        seen.append((in_flight, list(started)))  # as the probe's answer comes back
        return won

    monkeypatch.setattr(store, "breaker_take_probe", spy)
    try:
        got = await claimer.run_once()
        await claimer.wait_attempts()
    finally:
        threads.shutdown()
        runtime.close()
    assert seen == [(2, ["svc.job", "svc.job"])]
    assert sorted(t.task_type for t in got) == ["svc.job", "svc.job", "svc.partner"]
    assert started == ["svc.job", "svc.job", "svc.partner"]
    assert len(reported) == 3


def claim_backends(dsn: str) -> set[int]:
    """The backends of this test's database whose last statement was a claim."""
    return {
        r["pid"]
        for r in rows(
            dsn,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ~ 'taskq\\.claim_(batch_v3|few_v1)' AND pid <> pg_backend_pid()",
        )
    }


async def test_the_claimer_keeps_its_connection_from_round_to_round(dsn: str) -> None:
    """The pool hands its idle connections out in turn, and the first claim on a backend plans
    every statement of the claim functions: claims stay on one backend. A backend terminated
    between rounds is noticed before the next round and replaced, without a failed round; the
    connection goes back to the pool when the claimer stops."""
    app = job_app(dsn)
    pending(dsn, 8)
    async with AsyncConnectionPool(
        dsn, min_size=3, max_size=4, kwargs={"autocommit": True}
    ) as pool:
        await pool.wait()
        control = ControlWatcher(pool)
        claimer, reported, threads, runtime = await claimer_for(dsn, pool, app, 1, control)
        try:
            for _ in range(4):
                assert len(await claimer.run_once()) == 1
                await claimer.wait_attempts()
                async with pool.connection() as other:  # the pool's other users, in between
                    await other.execute("SELECT 1")
            [first] = claim_backends(dsn)
            execute(dsn, f"SELECT pg_terminate_backend({first})")
            await wait_until(
                lambda: not rows(dsn, f"SELECT 1 FROM pg_stat_activity WHERE pid = {first}"),
                what="the claim backend gone",
            )
            assert len(await claimer.run_once()) == 1  # no error: replaced first
            await claimer.wait_attempts()
            assert claimer.outage.outages == 0
            [second] = claim_backends(dsn)
            assert second != first
            stopper = asyncio.create_task(claimer.run())
            await wait_until(lambda: len(reported) == 8, what="the rest claimed and run")
            claimer.stop()
            await asyncio.wait_for(stopper, 10)
            stats = pool.get_stats()
            assert stats["pool_available"] == stats["pool_size"]  # given back
            assert claim_backends(dsn) == {second}
        finally:
            threads.shutdown()
            runtime.close()


# --- a worker that stopped claiming ------------------------------------------------------------


async def test_a_worker_whose_memory_never_comes_back_reports_it_and_exits_75(
    dsn: str, worker_factory: Any
) -> None:
    """Over the limit with nothing in flight: the heartbeat says it is not claiming (stats shows
    it), and after the grace the worker stops itself with exit code 75 for a restart."""
    app = job_app(dsn)
    pending(dsn, 1)
    handle = await worker_factory(
        app, max_memory_bytes=1, memory_grace_seconds=1.5, heartbeat_interval_seconds=0.2
    )
    worker = handle.worker
    await wait_until(
        lambda: bool(stats.report(dsn).not_claiming), what="stats reports it not claiming"
    )
    [stopped] = stats.report(dsn).not_claiming
    assert stopped["worker_id"] == worker.worker_id and "memory limit" in stopped["reason"]
    await asyncio.wait_for(worker.stopped.wait(), 15)
    assert worker.exit_code == EXIT_MEMORY
    assert worker.claimers["default"].claims == 0 and count(dsn, "status = 'PENDING'") == 1
    assert count_workers(dsn) == 0  # a clean exit: it held nothing


def test_health_fails_for_a_worker_that_claims_nothing(dsn: str) -> None:
    reason: list[str | None] = ["memory limit: resident 600 bytes >= --max-memory 500 bytes"]
    heartbeat = Heartbeat(
        dsn,
        worker_id="stuck",
        queues={"default": 1},
        interval_seconds=10,
        lease_seconds=30,
        held=list,
        on_lost=lambda ids: None,
        loop_silence=lambda: 0.0,
        claiming_stopped=lambda: reason[0],
    )
    try:
        heartbeat.run_once()
        found = health.check(dsn, worker_id="stuck")  # just stopped: still within the lease
        assert found.claiming_stopped_reason == reason[0]
        execute(dsn, "UPDATE taskq.workers SET claiming_stopped_at = now() - interval '40 s'")
        heartbeat.run_once()  # the beat keeps the time it stopped
        with pytest.raises(taskq.errors.Unhealthy, match="claimed nothing for 4"):
            health.check(dsn, worker_id="stuck")
        reason[0] = None
        heartbeat.run_once()  # claiming again
        assert health.check(dsn, worker_id="stuck").claiming_stopped_seconds is None
    finally:
        heartbeat.stop(unregister=True)


# --- NOTIFY spam -----------------------------------------------------------------------------


def notify_flood(dsn: str, seconds: float) -> int:
    """NOTIFY taskq_tasks for ``seconds``, as fast as one client can, each in its own
    transaction (so they arrive one by one, as from many producers); return how many."""
    sent = 0
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute("NOTIFY taskq_tasks, '[\"default\"]'")
            sent += 1
    return sent


async def test_a_task_right_after_a_short_round_is_claimed_without_waiting_for_the_pace(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """At idle, a task whose wake-up comes just after a claim round is claimed at once: the
    pacing holds rounds back only once they come faster than one per coalesce period (after
    its burst). A fixed gap after every short round held each task here for two seconds."""
    app = taskq.App(dsn=dsn)
    started = [asyncio.Event() for _ in range(COALESCE_BURST)]

    @app.task("svc.timed")
    async def timed(ctx: taskq.TaskContext, payload: Any) -> None:
        started[payload].set()

    claimer, _, threads, runtime = await claimer_for(
        dsn, pool, app, 3, ControlWatcher(pool), coalesce_seconds=2.0, poll_interval_seconds=30
    )
    loop = asyncio.create_task(claimer.run())
    try:
        # One short round per task (the first at start), each right after the one before.
        for n, event in enumerate(started):
            execute(
                dsn, f"INSERT INTO taskq.tasks (task_type, payload) VALUES ('svc.timed', '{n}')"
            )
            claimer.wake()  # what the task's NOTIFY does
            async with asyncio.timeout(1.0):
                await event.wait()
        assert claimer.rounds == len(started)
    finally:
        claimer.stop()
        await asyncio.wait_for(loop, 10)
        threads.shutdown()
        runtime.close()


@pytest.mark.slow
async def test_a_notify_flood_costs_bounded_claim_rounds(dsn: str, worker_factory: Any) -> None:
    """Two clients NOTIFY taskq_tasks as fast as they can at an idle worker: claim rounds are
    at most one per coalesce period while the flood lasts (after the pacing's first burst),
    however many notifications arrive.
    (Without coalescing every notification that finds the claimer waiting is a claim round.)"""
    app = job_app(dsn)
    coalesce = 0.05
    handle = await worker_factory(app, poll_interval_seconds=30, claim_coalesce_seconds=coalesce)
    worker = handle.worker
    claimer = worker.claimers["default"]
    notifier = worker.notifier
    assert notifier is not None
    await wait_until(lambda: claimer.rounds >= 1, what="the first claim round")
    await asyncio.sleep(0.1)
    rounds_before, heard_before = claimer.rounds, notifier.notifications
    start = time.monotonic()
    sent = sum(await asyncio.gather(*(asyncio.to_thread(notify_flood, dsn, 1.5) for _ in "ab")))
    await wait_until(
        lambda: notifier.notifications - heard_before >= sent, timeout=60, what="the flood heard"
    )
    await asyncio.sleep(2 * coalesce)  # the round the last notification asked for
    elapsed = time.monotonic() - start
    rounds = claimer.rounds - rounds_before
    print(f"NOTIFY flood: {sent} notifications in {elapsed:.2f}s -> {rounds} claim rounds")
    assert 1 <= rounds <= elapsed / coalesce + COALESCE_BURST + 3
