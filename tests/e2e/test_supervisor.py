"""`taskq worker --processes N`: a supervisor that runs N workers, restarts the ones that die,
and passes signals through for the graceful drain."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from tests.support import WorkerProcess, count, read_runs, rows, wait_until_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def worker_pids(dsn: str) -> set[int]:
    return {int(r["pid"]) for r in rows(dsn, "SELECT pid FROM taskq.workers")}


def test_two_processes_drain_restart_and_stop_gracefully(dsn: str, tmp_path: Path) -> None:
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}
    supervisor = WorkerProcess(
        dsn,
        "tests.apps.faults:app",
        "--processes",
        "2",
        "--queues",
        "default=4",
        "--heartbeat-interval",
        "0.5",
        "--reaper-interval",
        "0.3",
        "--poll-interval",
        "0.5",
        env=env,
        log_dir=tmp_path / "logs",
    )
    wait_until_sync(lambda: len(worker_pids(dsn)) == 2, what="two workers registered")
    first = worker_pids(dsn)
    assert supervisor.pid not in first  # the supervisor itself runs no tasks
    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, payload) SELECT 'fault.record',"
        " '{\"sleep\": 0.005}' FROM generate_series(1, 600) RETURNING id",
    )
    wait_until_sync(lambda: count(dsn, "status = 'SUCCESS'") >= 100, what="draining")
    victim = sorted(first)[0]
    os.kill(victim, signal.SIGKILL)
    wait_until_sync(
        lambda: len(worker_pids(dsn) - first) == 1, timeout=30, what="the dead process replaced"
    )
    wait_until_sync(lambda: count(dsn, "status = 'SUCCESS'") == 600, timeout=60, what="all done")
    assert supervisor.stop() == 0
    assert count(dsn, "status = 'PROCESSING'") == 0
    assert worker_pids(dsn) <= {victim}  # clean exits unregister; the killed one is stale
    pids = {pid for _, pid, _ in read_runs(tmp_path)}
    assert len(pids & first) == 2, "both original processes ran tasks"
    events = [e["event"] for e in supervisor.events()]
    assert "worker_process_died" in events and "supervisor_stopped" in events


def test_ready_is_announced_once_every_process_is_ready(dsn: str, tmp_path: Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(30)
    supervisor = WorkerProcess(
        dsn,
        "tests.apps.faults:app",
        "--processes",
        "3",
        log_dir=tmp_path / "logs",
        env={"NOTIFY_SOCKET": str(sock_path)},
    )
    try:
        assert sock.recv(256).decode() == "READY=1"
        assert len(worker_pids(dsn)) == 3  # every child had registered before READY
        supervisor.signal(signal.SIGTERM)
        assert sock.recv(256).decode() == "STOPPING=1"
        assert supervisor.proc.wait(30) == 0
    finally:
        supervisor.kill()
        sock.close()


def test_bad_processes_value(dsn: str, tmp_path: Path) -> None:
    from tests.support import taskq_cli

    result = taskq_cli(
        "worker", "--app", "tests.apps.faults:app", "--processes", "many", "--dsn", dsn
    )
    assert result.returncode == 1 and "--processes must be a number" in result.stderr
