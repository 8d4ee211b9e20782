"""Fault tests: killed workers, frozen workers, poison tasks, a PostgreSQL restart, terminated
backends, SIGTERM, and a crowd of workers killed at random. Each asserts numbers and is
bounded in time. Workers run with short test settings: heartbeat 0.5 s (lease 1.5 s), reaper
every 0.3 s, timeout grace 0.5 s."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import taskq
from taskq.db import migrate
from tests.support import (
    PrivateServer,
    WorkerProcess,
    count,
    read_runs,
    rows,
    status_of,
    wait_until,
    wait_until_sync,
    wakeup_latencies,
)

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

FAST = [
    "--heartbeat-interval", "0.5", "--reaper-interval", "0.3", "--timeout-grace", "0.5",
    "--poll-interval", "0.5",
]  # fmt: skip
LEASE = 1.5


def spawn(dsn: str, tmp_path: Path, *extra: str) -> WorkerProcess:
    return WorkerProcess(
        dsn,
        "tests.apps.faults:app",
        *FAST,
        *extra,
        env={"TASKQ_TEST_RUNS_DIR": str(tmp_path)},
        log_dir=tmp_path / "logs",
    )


def start(dsn: str, tmp_path: Path, *extra: str) -> WorkerProcess:
    """Spawn a worker and wait until it has registered (before its first claim)."""
    worker = spawn(dsn, tmp_path, *extra)
    worker.wait_ready()
    return worker


def enqueue_sql(
    dsn: str, task_type: str, payload: dict[str, Any] | None = None, n: int = 1
) -> list[int]:
    found = rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, payload) SELECT %s, %s::jsonb"
        " FROM generate_series(1, %s) RETURNING id",
        (task_type, json.dumps(payload or {}), n),
    )
    return [int(r["id"]) for r in found]


def test_kill_9_mid_task_is_rescued_within_the_lease(dsn: str, tmp_path: Path) -> None:
    [task_id] = enqueue_sql(dsn, "fault.block_first", {"seconds": 120})
    a, b = start(dsn, tmp_path), start(dsn, tmp_path)
    try:
        wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="first run")
        [(_, victim_pid, _)] = read_runs(tmp_path)
        victim, survivor = (a, b) if a.pid == victim_pid else (b, a)
        victim.kill()
        killed_at = time.monotonic()
        wait_until_sync(
            lambda: status_of(dsn, task_id)["status"] == "SUCCESS",
            timeout=30,
            what="rescued task re-run",
        )
        recovered = time.monotonic() - killed_at
    finally:
        a.kill(), b.kill()
    row = status_of(dsn, task_id)
    runs = sorted(read_runs(tmp_path), key=lambda r: r[2])
    assert [(r[1], r[2]) for r in runs] == [(victim_pid, 0), (survivor.pid, 1)]
    assert row["retry_count"] == 1 and row["last_error"].startswith("WorkerLost")
    # Rescued within the lease (+ a reaper pass + a claim), not after the task's 600 s timeout.
    assert recovered < LEASE + 5, recovered
    print(f"kill -9: task re-run by another worker {recovered:.2f}s after the kill")


def test_hung_handler_finishing_late_is_fenced_out(dsn: str, tmp_path: Path) -> None:
    """The first attempt blocks its worker's event loop far past its 1 s timeout (the owner
    cannot enforce it), the other worker's reaper rescues it, the retry succeeds elsewhere,
    and the late finisher's SUCCESS matches no row."""
    a = start(dsn, tmp_path)
    b: WorkerProcess | None = None
    try:
        [task_id] = enqueue_sql(dsn, "fault.wedge_first", {"seconds": 6})
        wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="first run")
        b = start(dsn, tmp_path)
        wait_until_sync(
            lambda: status_of(dsn, task_id)["status"] == "SUCCESS",
            timeout=30,
            what="second attempt",
        )
        second = status_of(dsn, task_id)
        wait_until_sync(
            lambda: any(e.get("event") == "lease_lost" for e in a.events()),
            timeout=20,
            what="late finisher fenced",
        )
    finally:
        a.kill()
        if b:
            b.kill()
    row = status_of(dsn, task_id)
    assert row["status"] == "SUCCESS" and row["retry_count"] == 1
    assert (
        row["effective_id"] == second["effective_id"]
        and row["finished_at"] == second["finished_at"]
    )
    assert row["worker_id"] != json.loads(a.log_path.read_text().splitlines()[0]).get("worker_id")
    runs = sorted(read_runs(tmp_path), key=lambda r: r[2])
    assert [(r[1], r[2]) for r in runs] == [(a.pid, 0), (b.pid, 1)]
    lost = [e for e in a.events() if e.get("event") == "lease_lost"]
    assert lost and lost[0]["task_id"] == task_id


def test_poison_task_dead_letters_and_the_pool_keeps_serving(dsn: str, tmp_path: Path) -> None:
    workers = [start(dsn, tmp_path, "--queues", "default=2") for _ in range(2)]
    [poison] = enqueue_sql(dsn, "fault.poison")
    others = enqueue_sql(dsn, "fault.record", {"sleep": 0.01}, n=60)
    restarts = 0
    deadline = time.monotonic() + 90
    try:
        # The test is the supervisor: restart a worker whenever one dies (as systemd would).
        while status_of(dsn, poison)["status"] != "DEAD_LETTER" or count(
            dsn, "status = 'SUCCESS'"
        ) < len(others):
            assert time.monotonic() < deadline, "poison task did not settle"
            for i, w in enumerate(workers):
                if w.proc.poll() is not None:
                    assert w.proc.returncode == 17
                    # Not waiting for it: the poison may kill it again at once.
                    workers[i] = spawn(dsn, tmp_path, "--queues", "default=2")
                    restarts += 1
            time.sleep(0.1)  # polling for process exit: there is no event to wait on
    finally:
        for w in workers:
            w.kill()
    row = status_of(dsn, poison)
    poison_runs = sorted((r for r in read_runs(tmp_path) if r[0] == poison), key=lambda r: r[2])
    assert row["status"] == "DEAD_LETTER" and row["retry_count"] == 2
    assert row["last_error"].startswith("WorkerLost: the process died while running this task")
    # max_retry_count=2: three charged runs alone, after at most one uncharged run beside
    # others (then it was isolated).
    assert [r[2] for r in poison_runs] in ([0, 1, 2], [0, 0, 1, 2]), poison_runs
    assert restarts == len(poison_runs)
    assert count(dsn, "task_type = 'fault.record' AND status = 'SUCCESS'") == 60
    assert count(dsn, "task_type = 'fault.record' AND retry_count > 0") == 0


@pytest.mark.timeout(90)
def test_a_poison_task_does_not_dead_letter_its_neighbours(dsn: str, tmp_path: Path) -> None:
    """`taskq worker --processes 2`, 4 slots each: a task that kills its process every time
    runs beside healthy ones. The neighbours that died with it are not charged (they go back
    PENDING, isolate, and run alone next); the poison is charged only for its crashes alone,
    and ends in DEAD_LETTER. Every healthy task succeeds on its first attempt's count."""
    ids = enqueue_sql(dsn, "fault.record", {"sleep": 0.3}, n=6)
    [poison] = enqueue_sql(dsn, "fault.poison")
    ids += enqueue_sql(dsn, "fault.record", {"sleep": 0.3}, n=18)
    supervisor = WorkerProcess(
        dsn,
        "tests.apps.faults:app",
        "--processes", "2", "--queues", "default=4", *FAST,
        env={"TASKQ_TEST_RUNS_DIR": str(tmp_path)},
        log_dir=tmp_path / "logs",
    )  # fmt: skip
    try:
        wait_until_sync(
            lambda: (
                status_of(dsn, poison)["status"] == "DEAD_LETTER"
                and count(dsn, "task_type = 'fault.record' AND status = 'SUCCESS'") == len(ids)
            ),
            timeout=60,
            what="the poison dead-lettered and every healthy task done",
        )
    finally:
        supervisor.kill()
    healthy = rows(
        dsn,
        "SELECT id, status, retry_count, crash_count, isolate FROM taskq.tasks WHERE id = ANY(%s)",
        (ids,),
    )
    assert all(r["status"] == "SUCCESS" and r["retry_count"] == 0 for r in healthy), healthy
    assert not any(r["isolate"] for r in healthy), healthy
    # The scenario happened: the poison killed a process while healthy tasks ran beside it.
    assert any(r["crash_count"] > 0 for r in healthy), healthy
    row = status_of(dsn, poison)
    assert row["retry_count"] == 2, row
    assert row["last_error"].startswith(
        "WorkerLost: the process died while running this task alone"
    ), row["last_error"]
    poison_runs = [r for r in read_runs(tmp_path) if r[0] == poison]
    assert len(poison_runs) <= 4, poison_runs  # at most one run beside others, three alone


def test_postgres_restart_while_draining(tmp_path: Path) -> None:
    server = PrivateServer(tmp_path / "pg")
    try:
        dsn = server.dsn
        migrate.upgrade(dsn)
        enqueue_sql(dsn, "fault.record", {"sleep": 0.002}, n=2000)
        worker = WorkerProcess(
            dsn,
            "tests.apps.faults:app",
            "--queues",
            "default=16",
            "--heartbeat-interval",
            "2",
            "--reaper-interval",
            "0.5",
            "--poll-interval",
            "0.5",
            env={"TASKQ_TEST_RUNS_DIR": str(tmp_path)},
            log_dir=tmp_path / "logs",
        )
        try:
            worker.wait_ready()
            wait_until_sync(lambda: count(dsn, "status = 'SUCCESS'") >= 200, what="some done")
            server.restart()
            restarted_at = time.monotonic()
            wait_until_sync(
                lambda: count(dsn, "status = 'SUCCESS'") == 2000,
                timeout=60,
                what="all 2000 SUCCESS after the restart",
            )
            drained_after = time.monotonic() - restarted_at
            assert worker.proc.poll() is None, "the worker survived the restart"
            assert count(dsn, "status = 'PROCESSING'") == 0
            assert count(dsn) == 2000
        finally:
            code = worker.stop()
        assert code == 0
        events = [e["event"] for e in worker.events()]
        assert "notifier_reconnected" in events
        # An outage is logged once per service (and its end once), not once per task or retry.
        down = [e["service"] for e in worker.events() if e["event"] == "service_unavailable"]
        up = [e["service"] for e in worker.events() if e["event"] == "service_resumed"]
        # Which services meet the outage depends on what each was doing at that moment (a
        # claimer waiting for free slots may never touch the database meanwhile), and one may
        # still be between beats when the worker stops; none logs it more than once.
        assert "notifier" in down and "notifier" in up, (down, up)
        assert set(up) <= set(down), (down, up)
        assert len(down) == len(set(down)) and len(up) == len(set(up)), (down, up)
        done = {r[0] for r in read_runs(tmp_path)}
        assert len(done) == 2000
        print(f"PostgreSQL restart: 2000 tasks drained {drained_after:.1f}s after the restart")
    finally:
        server.stop()


async def test_terminated_backends_reconnect_and_wake_fast(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    started: dict[int, float] = {}
    arrived = asyncio.Event()

    @app.task("job.ping")
    async def ping(ctx: taskq.TaskContext, payload: Any) -> None:
        started[payload["n"]] = time.monotonic()
        arrived.set()

    worker = taskq.Worker(app, dsn=dsn, settings=taskq.WorkerSettings(poll_interval_seconds=30))
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.ready.wait(), 15)
        assert worker.notifier is not None
        terminated = rows(
            dsn,
            "SELECT pg_terminate_backend(pid) AS ok, application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = ANY(%s)",
            ([f"taskq-listen-{os.getpid()}", f"taskq-worker-{os.getpid()}"],),
        )
        names = {r["application_name"] for r in terminated}
        assert names == {f"taskq-listen-{os.getpid()}", f"taskq-worker-{os.getpid()}"}
        await asyncio.wait_for(worker.notifier.reconnected.wait(), 15)
        latencies = await wakeup_latencies(dsn, started, arrived, count=15)
        # The first claim after the kill may meet a dead pooled connection and back off once;
        # after that, dispatch is NOTIFY-fast again.
        median_ms = statistics.median(latencies[1:]) * 1000
        assert median_ms < 50, latencies
    finally:
        worker.request_stop()
        await asyncio.wait_for(run, 30)


def test_sigterm_finishes_in_flight_and_claims_nothing_more(dsn: str, tmp_path: Path) -> None:
    [long_id] = enqueue_sql(dsn, "fault.long", {"seconds": 2})
    worker = start(dsn, tmp_path, "--queues", "default=1")
    wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="long task started")
    backlog = enqueue_sql(dsn, "fault.record", n=20)
    worker.signal(signal.SIGTERM)
    code = worker.proc.wait(30)
    assert code == 0
    assert status_of(dsn, long_id)["status"] == "SUCCESS"
    assert count(dsn, "status = 'PROCESSING'") == 0
    assert count(dsn, "status = 'PENDING'") == len(backlog)
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.workers")[0]["n"] == 0  # unregistered


def test_sigterm_past_the_shutdown_timeout_releases_uncharged(dsn: str, tmp_path: Path) -> None:
    [long_id] = enqueue_sql(dsn, "fault.long", {"seconds": 60})
    worker = start(dsn, tmp_path, "--shutdown-timeout", "1")
    wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="long task started")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(30) == 0
    assert time.monotonic() - started < 10
    row = status_of(dsn, long_id)
    assert row["status"] == "PENDING" and row["retry_count"] == 0 and row["effective_id"] is None
    assert "task_released" in [e["event"] for e in worker.events()]


def read_spans(folder: Path) -> list[tuple[int, int, float, float | None]]:
    """(task_id, pid, start, end or None) for every run of fault.sync_span."""
    runs: dict[tuple[int, int], list[float | None]] = {}
    for path in folder.glob("spans-*.log"):
        for line in path.read_text().splitlines():
            task_id, pid, edge, at = line.split()
            run = runs.setdefault((int(task_id), int(pid)), [None, None])
            run[0 if edge == "start" else 1] = float(at)
    return [(t, p, s or 0.0, e) for (t, p), (s, e) in runs.items()]


def test_sigterm_never_lets_a_running_sync_task_run_twice_at_once(dsn: str, tmp_path: Path) -> None:
    """A sync thread cannot be stopped: a shutdown must not give its row back while it runs,
    or the second worker (up, polling every 0.5 s) would run the task at the same time. The
    runs of the task never overlap in time."""
    [task_id] = enqueue_sql(dsn, "fault.sync_span", {"seconds": 6})
    first = start(dsn, tmp_path, "--shutdown-timeout", "0.5")
    wait_until_sync(lambda: len(read_spans(tmp_path)) == 1, what="sync task started")
    second = start(dsn, tmp_path)
    first.signal(signal.SIGTERM)
    assert first.proc.wait(30) == 0
    wait_until_sync(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", timeout=30)
    second.stop()
    runs = sorted(read_spans(tmp_path), key=lambda r: r[2])
    assert runs and all(end is not None for *_, end in runs), runs
    for before, after in itertools.pairwise(runs):
        assert before[3] is not None and before[3] <= after[2], f"runs overlap: {runs}"
    assert status_of(dsn, task_id)["retry_count"] == 0


def test_sigusr1_logs_where_the_worker_waits(dsn: str, tmp_path: Path) -> None:
    enqueue_sql(dsn, "fault.long", {"seconds": 60})
    worker = start(dsn, tmp_path)
    wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="long task started")
    worker.signal(signal.SIGUSR1)
    wait_until_sync(lambda: "stacks" in [e["event"] for e in worker.events()], what="stacks")
    [event] = [e for e in worker.events() if e["event"] == "stacks"]
    assert any("asyncio.sleep" in s or "sleep" in s for s in event["tasks"].values()), event
    assert any("taskq-claimer-default" in name for name in event["tasks"])
    assert any("MainThread" in name for name in event["threads"])
    assert worker.proc.poll() is None  # it keeps running
    worker.stop()


def test_second_signal_releases_at_once(dsn: str, tmp_path: Path) -> None:
    [long_id] = enqueue_sql(dsn, "fault.long", {"seconds": 60})
    worker = start(dsn, tmp_path, "--shutdown-timeout", "60")
    wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="long task started")
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    wait_until_sync(
        lambda: "worker_stopping" in [e["event"] for e in worker.events()], what="stopping"
    )
    worker.signal(signal.SIGINT)
    try:
        code = worker.proc.wait(30)
    except subprocess.TimeoutExpired:
        worker.signal(signal.SIGUSR1)  # where it waits
        wait_until_sync(lambda: "stacks" in [e["event"] for e in worker.events()], what="stacks")
        pytest.fail(f"still running 30 s after the second signal: {worker.log_path.read_text()}")
    assert code == 0
    assert time.monotonic() - started < 10
    assert status_of(dsn, long_id)["status"] == "PENDING"


@pytest.mark.slow
def test_crowd_of_workers_killed_at_random_loses_nothing(dsn: str, tmp_path: Path) -> None:
    """8 processes x 8 slots on 20,000 tasks; workers are SIGKILLed at random and restarted.
    Every task ends SUCCESS, and a task runs more than once only if a killed worker ran it."""
    total = 20_000
    extra = ("--queues", "default=8", "--log-level", "warning")
    workers = [spawn(dsn, tmp_path, *extra) for _ in range(8)]
    for w in workers:
        w.wait_ready()
    # 20 ms of "work" each: 64 slots need at least ~6 s, so the kills land mid-drain.
    enqueue_sql(dsn, "fault.record", {"sleep": 0.02}, n=total)
    killed: set[int] = set()
    rng = random.Random(1234)
    kill_at = [int(total * f) for f in (0.15, 0.4, 0.65)]  # a random worker at each point
    deadline = time.monotonic() + 150
    try:
        while (done := count(dsn, "status = 'SUCCESS'")) < total:
            assert time.monotonic() < deadline, "crowd did not drain"
            if kill_at and done >= kill_at[0]:
                kill_at.pop(0)
                i = rng.randrange(len(workers))
                killed.add(workers[i].pid)
                workers[i].kill()
                workers[i] = spawn(dsn, tmp_path, *extra)
            time.sleep(0.02)  # polling the drain for the kill points; no event to wait on
    finally:
        for w in workers:
            w.kill()
    runs = read_runs(tmp_path)
    per_task: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for task_id, pid, attempt in runs:
        per_task[task_id].append((attempt, pid))
    assert len(per_task) == total
    assert len(killed) == 3
    repeated = {t: sorted(v) for t, v in per_task.items() if len(v) > 1}
    for task_id, attempts in repeated.items():
        # Every run but one (the last) was on a worker we killed. Not ordered by attempt: a run
        # that died beside others is not charged, so two runs may both be attempt 0.
        survivors = [pid for _, pid in attempts if pid not in killed]
        assert len(survivors) <= 1, (task_id, attempts, killed)
    assert count(dsn, "status = 'PROCESSING'") == 0
    print(f"crowd: {len(repeated)} of {total} tasks ran twice, all on killed workers")


def test_one_megabyte_payload_round_trips_through_a_worker(dsn: str, tmp_path: Path) -> None:
    size = 1024 * 1024
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn:
        task_id = app.enqueue(conn, "fault.big", {"blob": "x" * size, "size": size})
        with pytest.raises(taskq.PayloadError, match="limit is"):
            taskq.App(dsn=dsn, max_payload_bytes=size).enqueue(
                conn, "fault.big", {"blob": "x" * size}
            )
    worker = start(dsn, tmp_path)
    try:
        wait_until_sync(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="big done")
    finally:
        worker.stop()
    assert count(dsn) == 1


async def test_memory_guard_stops_claiming(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("job.any")
    async def anything(ctx: taskq.TaskContext, payload: Any) -> None: ...

    rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('job.any') RETURNING id")
    handle = await worker_factory(app, max_memory_bytes=1, poll_interval_seconds=0.1)
    claimer = handle.worker.claimers["default"]
    await asyncio.wait_for(claimer.memory_blocked.wait(), 10)
    claimer.memory_blocked.clear()
    await asyncio.wait_for(claimer.memory_blocked.wait(), 10)  # and again: it keeps refusing
    assert claimer.claims == 0
    assert count(dsn, "status = 'PENDING'") == 1
    await handle.stop()
    await worker_factory(app, max_memory_bytes=10 * 1024**3)
    await wait_until(lambda: count(dsn, "status = 'SUCCESS'") == 1, what="claimed under the limit")


def test_memory_that_never_comes_back_exits_75_for_a_restart(dsn: str, tmp_path: Path) -> None:
    """Over --max-memory with nothing in flight for --memory-grace: the worker exits 75 (its
    supervisor or systemd restarts it) instead of heart-beating on without ever claiming."""
    worker = spawn(dsn, tmp_path, "--max-memory", "1", "--memory-grace", "1")
    assert worker.proc.wait(60) == 75
    events = [e["event"] for e in worker.events()]
    assert "memory_limit_reached" in events and "memory_limit_exit" in events
    assert count(dsn, "true") == 0 and not rows(dsn, "SELECT id FROM taskq.workers")


def test_systemd_notify_ready_watchdog_stopping(dsn: str, tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(15)
    worker = WorkerProcess(
        dsn,
        "tests.apps.faults:app",
        *FAST,
        log_dir=tmp_path / "logs",
        env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1500000"},
    )
    try:
        messages = []
        while "WATCHDOG=1" not in messages:
            messages.append(sock.recv(256).decode())
        assert messages[0] == "READY=1"
        worker.signal(signal.SIGTERM)
        while "STOPPING=1" not in messages:
            messages.append(sock.recv(256).decode())
        assert worker.proc.wait(30) == 0
    finally:
        worker.kill()
        sock.close()
