"""Operating taskq: metrics, logs, stats, plan, pause switches, circuit breakers and protection
levels, live progress, retention."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

import taskq
from taskq.control.protection import (
    ProtectionEvaluator,
    ProtectionSettings,
    claim_policy,
    level_for,
)
from taskq.control.state import ControlState, Level
from taskq.model import TaskOptions
from taskq.ops import switches
from tests.support import (
    WorkerProcess,
    all_in,
    count,
    execute,
    rows,
    taskq_cli,
    taskq_command,
    wait_until,
    wait_until_sync,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- metrics ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_metrics_families_are_scraped(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("m.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None: ...

    @app.task("m.bad", max_retry_count=0)
    async def bad(ctx: taskq.TaskContext, payload: Any) -> None:
        raise ValueError("no")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "m.ok"}] * 5 + [{"task_type": "m.bad"}])
        await app.enqueue(conn, "m.ok", delay=3600)  # scheduled for later
    switches.switch_set(dsn, "m.sending", False)
    port = free_port()
    handle = await worker_factory(app, metrics_port=port, gauge_interval_seconds=0.2)
    await wait_until(lambda: count(dsn, "status IN ('SUCCESS', 'DEAD_LETTER')") == 6, what="done")
    await asyncio.wait_for(handle.worker.elector.elected.wait(), 15)

    def gauges_ready() -> bool:
        text = scrape(port)
        return (
            sample(text, "taskq_backlog_tasks", task_type="m.bad", state="dead_letter") == 1
            and sample(text, "taskq_switch_enabled", switch="m.sending") == 0
        )

    await wait_until(gauges_ready, what="leader gauges")
    text = scrape(port)
    q = {"queue": "default"}
    assert sample(text, "taskq_tasks_finished_total", task_type="m.ok", outcome="success") == 5
    # One run, no retry left: the failure dead-letters it, and it is counted as such.
    assert (
        sample(text, "taskq_tasks_finished_total", task_type="m.bad", outcome="dead_lettered") == 1
    )
    assert sample(text, "taskq_task_attempts_total", task_type="m.ok", attempt="0") == 5
    assert sample(text, "taskq_dispatch_latency_seconds_count", task_type="m.ok", **q) == 5
    assert sample(text, "taskq_task_run_seconds_count", task_type="m.ok", **q) == 5
    assert sample(text, "taskq_capacity_slots", **q) == 10
    assert sample(text, "taskq_running_tasks", **q) is not None
    assert sample(text, "taskq_backlog_tasks", task_type="m.ok", state="scheduled") == 1
    assert sample(text, "taskq_oldest_runnable_age_seconds", task_type="m.ok") == 0
    assert sample(text, "taskq_protection_level") == 0
    assert sample(text, "taskq_switch_enabled", switch="m.sending") == 0
    assert sample(text, "taskq_leader") == 1
    for family in (
        "taskq_db_dead_tuples",
        "taskq_db_last_vacuum_timestamp_seconds",
        "taskq_db_oldest_transaction_seconds",
        "taskq_db_notification_queue_usage_ratio",
    ):
        assert sample(text, family) is not None, family


async def test_only_the_leader_exports_backlog(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("m.any")
    async def anything(ctx: taskq.TaskContext, payload: Any) -> None: ...

    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, scheduled_at) VALUES ('m.any', now() + '1h')"
        " RETURNING id",
    )
    ports = [free_port(), free_port()]
    handles = [await worker_factory(app, metrics_port=p, gauge_interval_seconds=0.2) for p in ports]

    def one_leader_exports() -> bool:
        texts = [scrape(p) for p in ports]
        exported = [sample(t, "taskq_backlog_tasks", state="scheduled") for t in texts]
        leaders = [sample(t, "taskq_leader") for t in texts]
        return sorted(leaders) == [0, 1] and sorted(exported, key=str) == [1.0, None]

    await wait_until(one_leader_exports, what="exactly one exporter")
    assert sum(h.worker.elector.is_leader for h in handles) == 1


@pytest.mark.slow
def test_json_logs_have_the_fixed_keys_and_no_payload(dsn: str, tmp_path: Path) -> None:
    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, payload, biz_id) VALUES"
        " ('test.record', '{\"secret\": \"hunter2\"}', 'b-1') RETURNING id",
    )
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}
    worker = WorkerProcess(dsn, "tests.apps.basic:app", env=env, log_dir=tmp_path / "a")
    wait_until_sync(lambda: count(dsn, "status = 'SUCCESS'") == 1, what="done")
    worker.stop()
    [event] = [e for e in worker.events() if e["event"] == "task_succeeded"]
    for key in (
        "task_id",
        "task_type",
        "queue",
        "biz_id",
        "trace_id",
        "attempt",
        "effective_id",
        "worker_id",
        "duration_ms",
        "timestamp",
        "level",
    ):
        assert key in event, key
    assert "hunter2" not in worker.log_path.read_text()

    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, payload) VALUES"
        " ('test.record', '{\"secret\": \"hunter3\"}') RETURNING id",
    )
    loud = WorkerProcess(
        dsn, "tests.apps.basic:app", "--log-payloads", env=env, log_dir=tmp_path / "b"
    )
    wait_until_sync(lambda: count(dsn, "status = 'SUCCESS'") == 2, what="done")
    loud.stop()
    assert "hunter3" in loud.log_path.read_text()


# --- stats and plan --------------------------------------------------------------------------


@pytest.mark.slow
async def test_stats_report(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("s.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        await asyncio.sleep(0.01)

    @app.task("s.flaky", max_retry_count=1, retry_delay=0, retry_jitter=0)
    async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
        if ctx.attempt == 0:
            raise RuntimeError("first try fails")

    @app.task("s.dead", max_retry_count=0)
    async def dead(ctx: taskq.TaskContext, payload: Any) -> None:
        raise RuntimeError("always")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(
            conn,
            [{"task_type": "s.ok"}] * 10
            + [{"task_type": "s.flaky"}] * 2
            + [{"task_type": "s.dead"}],
        )
    await worker_factory(app, queues={"default": 3})
    await wait_until(all_in(dsn, {"SUCCESS", "DEAD_LETTER"}), what="settled")
    result = taskq_cli("stats", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    types = {t["task_type"]: t for t in report["types"]}
    ok_stats, flaky_stats, dead_stats = types["s.ok"], types["s.flaky"], types["s.dead"]
    assert ok_stats["outcomes"] == {"success": 10}
    assert ok_stats["per_minute"] == pytest.approx(10 / 15)
    assert ok_stats["success_rate"] == 1.0 and ok_stats["failure_rate"] == 0.0
    assert len(ok_stats["run_seconds"]) == 3 and ok_stats["run_seconds"][0] >= 0.01
    assert len(ok_stats["dispatch_seconds"]) == 3
    assert ok_stats["retries"] == {"0": 10}
    assert flaky_stats["outcomes"] == {"success": 2, "failed": 2}
    assert flaky_stats["failure_rate"] == 0.5 and flaky_stats["retries"] == {"1": 2}
    assert dead_stats["backlog"]["dead_letter"] == 1 and dead_stats["dead_letter_growth"] == 1
    assert report["capacity"]["default"]["slots"] == 3
    assert report["protection"]["level"] == 0
    human = taskq_cli("stats", "--dsn", dsn)
    assert human.returncode == 0 and "s.flaky" in human.stdout and "L0 NORMAL" in human.stdout


@pytest.mark.slow
def test_plan_reproduces_the_design_notes_example(dsn: str) -> None:
    """392 tasks in 48 h at concurrency 4 -> 29 min per task -> 8 slots for 720 in 48 h."""
    result = taskq_cli(
        "plan",
        "--tasks",
        "720",
        "--within",
        "48h",
        "--observed",
        "392",
        "--over",
        "48h",
        "--at-concurrency",
        "4",
        "--json",
        "--dsn",
        dsn,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["mean_seconds"] / 60 == pytest.approx(29.4, abs=0.1)
    assert plan["concurrency_exact"] == pytest.approx(7.35, abs=0.01)
    assert plan["slots"] == 8 and plan["processes"] == 1
    human = taskq_cli(
        "plan",
        "--tasks",
        "720",
        "--within",
        "48h",
        "--observed",
        "392",
        "--over",
        "48h",
        "--at-concurrency",
        "4",
        "--dsn",
        dsn,
    )
    assert "8 slot(s)" in human.stdout and "--queues QUEUE=8" in human.stdout


@pytest.mark.slow
def test_plan_from_measured_run_times(dsn: str) -> None:
    execute(
        dsn,
        "INSERT INTO taskq.task_stats (bucket, queue, task_type, outcome, n, run_seconds)"
        " VALUES (date_trunc('minute', now()), 'default', 'report.build', 'success', 10,"
        " 6000)",
    )  # mean 600 s
    plan = json.loads(
        taskq_cli(
            "plan",
            "--tasks",
            "1000",
            "--within",
            "1d",
            "--task-type",
            "report.build",
            "--json",
            "--dsn",
            dsn,
        ).stdout
    )
    assert plan["mean_seconds"] == 600 and plan["slots"] == 7  # 1000/86400*600 = 6.94
    huge = json.loads(
        taskq_cli(
            "plan",
            "--tasks",
            "10000000",
            "--within",
            "1d",
            "--duration",
            "10m",
            "--json",
            "--dsn",
            dsn,
        ).stdout
    )
    assert huge["processes"] > 1 and huge["slots_per_process"] <= 256
    missing = taskq_cli(
        "plan", "--tasks", "10", "--within", "1d", "--task-type", "nope", "--dsn", dsn
    )
    assert missing.returncode == 1 and "no successful runs" in missing.stderr


# --- pause / resume --------------------------------------------------------------------------


@pytest.mark.slow
async def test_pause_a_type_and_resume_it(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    ran: list[str] = []
    others_done = asyncio.Event()

    @app.task("p.sms")
    async def sms(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.append("sms")

    @app.task("p.mail")
    async def mail(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.append("mail")
        if ran.count("mail") == 20:
            others_done.set()

    handle = await worker_factory(app, poll_interval_seconds=0.2)
    control = handle.worker.control
    result = await asyncio.to_thread(
        taskq_cli, "pause", "p.sms", "--note", "provider down", "--dsn", dsn
    )
    # From the committed pause (the command has returned), not from the command's start: its
    # interpreter start-up is seconds on a loaded machine and says nothing about propagation.
    paused_at = time.monotonic()
    assert result.returncode == 0 and "paused task type p.sms" in result.stdout
    while "p.sms" not in control.state.paused_types:
        await asyncio.wait_for(_next_refresh(control), 2)
    seen_after = time.monotonic() - paused_at
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "p.sms"}] * 5)
        await app.enqueue_many(conn, [{"task_type": "p.mail"}] * 20)
    await asyncio.wait_for(others_done.wait(), 15)  # the other type kept running...
    assert "sms" not in ran and count(dsn, "task_type = 'p.sms' AND status = 'PENDING'") == 5
    report = json.loads(taskq_cli("stats", "--json", "--dsn", dsn).stdout)
    [pause] = report["pauses"]
    assert (
        pause["name"] == "p.sms" and pause["note"] == "provider down" and "@" in pause["paused_by"]
    )
    human = taskq_cli("stats", "--dsn", dsn).stdout
    assert "paused task_type p.sms by" in human
    again = taskq_cli("pause", "p.sms", "--dsn", dsn)
    assert "already paused" in again.stdout
    assert taskq_cli("resume", "p.sms", "--dsn", dsn).returncode == 0
    await wait_until(lambda: ran.count("sms") == 5, what="the backlog drains on resume")
    # The handler returning is not the row being SUCCESS: the completer writes it a moment later.
    await wait_until(
        lambda: count(dsn, "status = 'SUCCESS'") == 25, what="the completions are written"
    )
    assert count(dsn, "status <> 'SUCCESS'") == 0  # nothing lost, nothing failed
    audit = [r["action"] for r in rows(dsn, "SELECT action FROM taskq.audit ORDER BY id")]
    assert audit == ["pause", "resume"]
    # Seen by the worker within a second (NOTIFY; the poll is only the fallback).
    assert seen_after < 1.5, seen_after


async def _next_refresh(control: Any) -> None:
    control.refreshed.clear()
    await control.refreshed.wait()


@pytest.mark.slow
async def test_pause_a_queue(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("q.a", queue="slow")
    async def a(ctx: taskq.TaskContext, payload: Any) -> None: ...

    assert taskq_cli("pause", "--queue", "slow", "--dsn", dsn).returncode == 0
    rows(dsn, "INSERT INTO taskq.tasks (task_type, queue) VALUES ('q.a', 'slow') RETURNING id")
    handle = await worker_factory(app, queues={"slow": 2})
    claimer = handle.worker.claimers["slow"]
    for _ in range(3):  # several claim loops pass: it claims nothing
        claimer.wake()
        await asyncio.wait_for(_next_refresh(handle.worker.control), 3)
    assert claimer.claims == 0 and count(dsn, "status = 'PENDING'") == 1
    assert taskq_cli("resume", "--queue", "slow", "--dsn", dsn).returncode == 0
    await wait_until(all_in(dsn, {"SUCCESS"}), what="drained after resume")
    bad = taskq_cli("pause", "--dsn", dsn)
    assert bad.returncode == 1 and "one of them" in bad.stderr


# --- circuit breakers and protection levels --------------------------------------------------


def test_claim_policy_by_level() -> None:
    h = [TaskOptions("a"), TaskOptions("b", essential=True), TaskOptions("c")]
    normal = claim_policy(ControlState(), queue="q", handlers=h, free=8, slots=8)
    assert [x.task_type for x in normal.handlers] == ["a", "b", "c"] and normal.limit == 8
    paused = ControlState(paused_types=frozenset({"a"}), breakers={"c": "OPEN"})
    p = claim_policy(paused, queue="q", handlers=h, free=8, slots=8)
    assert [x.task_type for x in p.handlers] == ["b"]
    half = claim_policy(
        ControlState(breakers={"c": "HALF_OPEN"}), queue="q", handlers=h, free=8, slots=8
    )
    assert half.probes == ("c",) and "c" not in [x.task_type for x in half.handlers]
    assert (
        claim_policy(
            ControlState(paused_queues=frozenset({"q"})), queue="q", handlers=h, free=8, slots=8
        ).limit
        == 0
    )
    l1 = claim_policy(ControlState(level=Level.WARNING), queue="q", handlers=h, free=8, slots=8)
    assert l1.limit == 4 and not l1.retries_only
    l2 = claim_policy(ControlState(level=Level.DEGRADED), queue="q", handlers=h, free=6, slots=8)
    assert [x.task_type for x in l2.handlers] == ["b"] and l2.limit == 2  # 4 of 8, 2 in use
    l3 = claim_policy(
        ControlState(level=Level.CIRCUIT_OPEN), queue="q", handlers=h, free=8, slots=8
    )
    assert l3.retries_only
    assert (
        claim_policy(
            ControlState(level=Level.EMERGENCY), queue="q", handlers=h, free=8, slots=8
        ).limit
        == 0
    )
    assert [level_for(n, (2, 3, 4, 6)) for n in (0, 1, 2, 3, 4, 5, 6, 9)] == [
        0,
        0,
        1,
        2,
        3,
        3,
        4,
        4,
    ]


@pytest.mark.slow
async def test_a_breaker_opens_waits_probes_and_closes(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    healthy = False
    attempts: list[bool] = []

    @app.task("cb.partner", retry_delay=0.05, retry_jitter=0, max_retry_count=20)
    async def partner(ctx: taskq.TaskContext, payload: Any) -> None:
        attempts.append(healthy)
        if not healthy:
            raise ConnectionError("partner API down")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "cb.partner"}] * 10)
    settings = ProtectionSettings(
        breaker_threshold=3, breaker_cooldown_seconds=1.0, evaluate_interval_seconds=0.1
    )
    handle = await worker_factory(
        app, queues={"default": 1}, protection=settings, poll_interval_seconds=0.1
    )
    control = handle.worker.control

    def breaker() -> dict[str, Any]:
        found = rows(dsn, "SELECT * FROM taskq.breakers WHERE task_type = 'cb.partner'")
        return found[0] if found else {}

    await wait_until(lambda: breaker().get("state") == "OPEN", what="breaker opens")
    # The third failure opened it, in the statement that wrote it; from then on the claim
    # function skips the type. Attempts claimed before that write may still fail after it (the
    # completer writes in batches and runs behind a fast-failing slot, more so on a loaded
    # machine), but each of the 10 tasks at most once: never more than 3 + 10.
    assert 3 <= breaker()["consecutive_failures"] <= 13
    # The reason counts the failures of the write that opened it: 3, or more when the
    # completer wrote the third failure in one batch with later ones.
    opened_by = re.fullmatch(r"(\d+) consecutive failures", breaker()["reason"])
    assert opened_by is not None and 3 <= int(opened_by.group(1)) <= 13, breaker()["reason"]
    while control.state.breakers.get("cb.partner") != "OPEN":
        await asyncio.wait_for(_next_refresh(control), 2)
    tried = len(attempts)
    status = json.loads(taskq_cli("circuit", "status", "--json", "--dsn", dsn).stdout)
    assert status["breakers"][0]["state"] == "OPEN"
    healthy = True
    await wait_until(
        lambda: breaker().get("state") == "HALF_OPEN" or breaker().get("state") == "CLOSED",
        what="cool-down over",
    )
    # Once the worker saw the breaker open, no attempt ran until the cool-down: it waited.
    assert attempts[:tried] == [False] * tried and attempts.count(False) == tried
    assert count(dsn, "status = 'DEAD_LETTER'") == 0  # waiting, not failing
    await wait_until(lambda: breaker().get("state") == "CLOSED", what="probe closes it")
    assert breaker()["reason"] == "probe succeeded"
    await wait_until(all_in(dsn, {"SUCCESS"}), what="the backlog drains")
    assert attempts.count(True) == 10


@pytest.mark.slow
async def test_a_reset_after_the_downstream_recovered_runs_new_work_at_once(
    dsn: str, worker_factory: Any
) -> None:
    """The downstream is back and the operator resets the breaker: new work runs now, not after
    the cool-down (an hour here), and the failures still in the rate window do not re-open it."""
    app = taskq.App(dsn=dsn)
    healthy = False

    @app.task("rs.partner", retry_delay=3600, retry_jitter=0)
    async def partner(ctx: taskq.TaskContext, payload: Any) -> None:
        if not healthy:
            raise ConnectionError("partner API down")

    settings = ProtectionSettings(
        breaker_threshold=3,
        breaker_cooldown_seconds=3600,
        breaker_min_volume=3,  # the rate path sees the failures too
        evaluate_interval_seconds=0.05,
    )
    handle = await worker_factory(
        app, queues={"default": 1}, protection=settings, poll_interval_seconds=0.1
    )
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "rs.partner"}] * 5)

    def state() -> str | None:
        found = rows(dsn, "SELECT state FROM taskq.breakers WHERE task_type = 'rs.partner'")
        return found[0]["state"] if found else None

    await wait_until(lambda: state() == "OPEN", what="the breaker opens")
    healthy = True
    result = switches.circuit_reset(dsn, task_type="rs.partner", note="partner is back")
    assert result["closed_breakers"] == ["rs.partner"]
    evaluator = handle.worker.protection
    assert evaluator is not None
    for _ in range(3):  # the leader evaluates the rate window a few times after the reset
        evaluator.evaluated.clear()
        await asyncio.wait_for(evaluator.evaluated.wait(), 5)
    assert state() == "CLOSED"
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, [{"task_type": "rs.partner", "biz_id": "new"}])
    await wait_until(
        lambda: count(dsn, "biz_id = 'new' AND status = 'SUCCESS'") == 1,
        timeout=10,
        what="new work runs after the reset",
    )
    assert time.monotonic() - started < 10
    assert state() == "CLOSED"


@pytest.mark.slow
async def test_an_idle_half_open_breaker_lets_the_level_fall(dsn: str, worker_factory: Any) -> None:
    """A HALF_OPEN breaker whose backlog is gone: the claimer that wins its probe finds nothing
    to run, and the level it was holding up falls (it used to stay raised for ever)."""
    app = taskq.App(dsn=dsn)

    @app.task("ih.partner")
    async def partner(ctx: taskq.TaskContext, payload: Any) -> None: ...

    execute(
        dsn,
        "INSERT INTO taskq.breakers (task_type, state, opened_at) VALUES ('ih.partner',"
        " 'HALF_OPEN', now() - interval '1 hour'); UPDATE taskq.protection SET level = 1",
    )
    settings = ProtectionSettings(
        level_thresholds=(1, 2, 3, 4), calm_seconds=0.2, evaluate_interval_seconds=0.05
    )
    await worker_factory(app, protection=settings, poll_interval_seconds=0.1)
    await wait_until(
        lambda: rows(dsn, "SELECT level FROM taskq.protection")[0]["level"] == 0,
        timeout=10,
        what="the level falls",
    )
    [b] = rows(dsn, "SELECT state, probed_empty_at FROM taskq.breakers")
    assert b["state"] == "HALF_OPEN" and b["probed_empty_at"] is not None


@pytest.mark.slow
async def test_protection_level_rises_at_once_falls_with_hysteresis_and_l4_needs_a_human(
    dsn: str,
) -> None:
    from psycopg_pool import AsyncConnectionPool

    settings = ProtectionSettings(
        level_thresholds=(1, 2, 3, 4), calm_seconds=0.3, breaker_cooldown_seconds=3600
    )
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        evaluator = ProtectionEvaluator(pool, settings, worker_id="t")
        for name in ("a", "b", "c"):
            execute(
                dsn,
                f"INSERT INTO taskq.breakers (task_type, state, opened_at)"
                f" VALUES ('{name}', 'OPEN', now())",
            )
        assert await evaluator.run_once() == Level.CIRCUIT_OPEN  # 3 failing -> L3 at once
        execute(dsn, "UPDATE taskq.breakers SET state = 'CLOSED'")
        assert await evaluator.run_once() == Level.CIRCUIT_OPEN  # calm just started
        await asyncio.sleep(0.35)  # the hysteresis window is a duration by design
        assert await evaluator.run_once() == Level.DEGRADED  # one step down, not to L0
        assert (
            taskq_cli("circuit", "level", "4", "--note", "incident", "--dsn", dsn).returncode == 0
        )
        await asyncio.sleep(0.35)
        assert await evaluator.run_once() == Level.EMERGENCY  # never lowered automatically
        human = taskq_cli("circuit", "status", "--dsn", dsn)
        assert "L4 EMERGENCY" in human.stdout and "incident" in human.stdout
        reset = taskq_cli("circuit", "reset", "--note", "all clear", "--dsn", dsn)
        assert reset.returncode == 0 and "level reset to L0" in reset.stdout
        assert await evaluator.run_once() == Level.NORMAL
    actions = [r["action"] for r in rows(dsn, "SELECT action FROM taskq.audit ORDER BY id")]
    assert "protection_level" in actions and "breaker_reset" in actions


@pytest.mark.slow
async def test_emergency_level_stops_dispatch(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("e.any")
    async def anything(ctx: taskq.TaskContext, payload: Any) -> None: ...

    assert taskq_cli("circuit", "level", "4", "--dsn", dsn).returncode == 0
    rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('e.any') RETURNING id")
    handle = await worker_factory(app, poll_interval_seconds=0.1)
    assert handle.worker.control.state.level == Level.EMERGENCY
    for _ in range(3):
        await asyncio.wait_for(_next_refresh(handle.worker.control), 3)
    assert count(dsn, "status = 'PENDING'") == 1
    assert taskq_cli("circuit", "reset", "--dsn", dsn).returncode == 0
    await wait_until(all_in(dsn, {"SUCCESS"}), what="dispatch resumes after the reset")


# --- live progress ---------------------------------------------------------------------------


@pytest.mark.slow
def test_watch_shows_progress_and_the_final_status(dsn: str, tmp_path: Path) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn:
        task_id = app.enqueue(conn, "ops.report", {"steps": 5})
    watcher = subprocess.Popen(
        [*taskq_command(), "watch", str(task_id), "--json", "--timeout", "60", "--dsn", dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout is not None
    first = watcher.stdout.readline()  # the watcher is listening before the task starts
    worker = WorkerProcess(dsn, "tests.apps.operations:app", log_dir=tmp_path)
    try:
        rest, err = watcher.communicate(timeout=60)
    finally:
        worker.stop()
    out = first + rest
    assert watcher.returncode == 0, err
    updates = [json.loads(line) for line in out.splitlines()]
    assert updates[0]["status"] == "PENDING" and updates[-1]["status"] == "SUCCESS"
    percents = [u["percent"] for u in updates if u["percent"] is not None]
    assert percents == sorted(percents) and percents[-1] == 100
    assert any(0 < p < 100 for p in percents), "intermediate progress was seen live"
    # A late watcher sees the stored state at once, and a dead letter exits 1.
    late = taskq_cli("watch", str(task_id), "--dsn", dsn)
    assert late.returncode == 0 and "SUCCESS" in late.stdout
    dead = int(
        rows(
            dsn,
            "INSERT INTO taskq.tasks (task_type, status, last_error) VALUES"
            " ('x', 'DEAD_LETTER', 'ValueError: bad') RETURNING id",
        )[0]["id"]
    )
    result = taskq_cli("watch", str(dead), "--dsn", dsn)
    assert result.returncode == 1 and "DEAD_LETTER: ValueError: bad" in result.stderr


# --- retention -------------------------------------------------------------------------------


@pytest.mark.slow
def test_prune_deletes_old_finished_rows_in_batches(dsn: str) -> None:
    execute(
        dsn,
        """
        INSERT INTO taskq.tasks (task_type, status, finished_at)
        SELECT 'old', 'SUCCESS', now() - interval '8 days' FROM generate_series(1, 12000);
        INSERT INTO taskq.tasks (task_type, status, finished_at)
        SELECT 'new', 'SUCCESS', now() - interval '1 day' FROM generate_series(1, 10);
        INSERT INTO taskq.tasks (task_type, status, finished_at)
        SELECT 'dead', 'DEAD_LETTER', now() - interval '30 days' FROM generate_series(1, 3);
        INSERT INTO taskq.tasks (task_type, status, finished_at)
        SELECT 'gone', 'CANCELLED', now() - interval '8 days' FROM generate_series(1, 2);
        INSERT INTO taskq.tasks (task_type) SELECT 'live' FROM generate_series(1, 4);
    """,
    )
    result = taskq_cli("prune", "--older-than", "7d", "--batch", "5000", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"success": 12000, "cancelled": 2, "dead_letter": 0}
    assert count(dsn) == 10 + 3 + 4
    result = taskq_cli("prune", "--older-than", "7d", "--dead-letters", "--dsn", dsn)
    assert "deleted 0 SUCCESS row(s), 0 CANCELLED row(s) and 3 dead letter(s)" in result.stdout
    assert count(dsn) == 14
    bad = taskq_cli("prune", "--older-than", "soon", "--dsn", dsn)
    assert bad.returncode == 1 and "--older-than" in bad.stderr


async def test_the_worker_prunes_on_the_leader(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("r.any")
    async def anything(ctx: taskq.TaskContext, payload: Any) -> None: ...

    execute(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status, finished_at) SELECT 'r.any',"
        " 'SUCCESS', now() - interval '2 days' FROM generate_series(1, 100)",
    )
    await worker_factory(app, prune_after_seconds=86400)
    await wait_until(lambda: count(dsn) == 0, what="pruned by the leader")
