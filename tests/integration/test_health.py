"""``taskq health``: the exit codes a container health check reads, against a real worker."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import WorkerProcess, rows, taskq_cli, wait_until_sync

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=2"
FAST = ["--heartbeat-interval", "0.3", "--poll-interval", "0.5"]  # lease: 0.9 s


def one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def add_worker(dsn: str, worker_id: str, *, silent_seconds: float, pid: int = 4242) -> None:
    rows(
        dsn,
        "INSERT INTO taskq.workers (id, host, pid, version, lease_seconds, heartbeat_at) "
        "VALUES (%s, %s, %s, 'test', 30, now() - make_interval(secs => %s)) RETURNING id",
        (worker_id, socket.gethostname(), pid, silent_seconds),
    )


def test_help() -> None:
    result = taskq_cli("health", "--help")
    assert result.returncode == 0 and "--dsn" in result.stdout and "--pid" in result.stdout


def test_database_down_exits_3() -> None:
    one_line_error(taskq_cli("health", "--dsn", UNREACHABLE), 3, "database unavailable")


@pytest.mark.slow
def test_no_worker_is_unhealthy(dsn: str) -> None:
    one_line_error(taskq_cli("health", "--dsn", dsn), 1, "no worker is registered on host")
    one_line_error(taskq_cli("health", "--worker-id", "w-1", "--dsn", dsn), 1, "no worker 'w-1'")
    # A worker on another host is not this container's worker.
    rows(
        dsn,
        "INSERT INTO taskq.workers (id, host, pid, version, lease_seconds) "
        "VALUES ('elsewhere', 'another-host', 1, 'test', 30) RETURNING id",
    )
    one_line_error(taskq_cli("health", "--dsn", dsn), 1, "no worker is registered on host")
    assert taskq_cli("health", "--worker-id", "elsewhere", "--dsn", dsn).returncode == 0
    one_line_error(
        taskq_cli("health", "--worker-id", "elsewhere", "--pid", "1", "--dsn", dsn),
        1,
        "not both",
    )


@pytest.mark.slow
def test_live_worker_is_healthy_until_it_dies(dsn: str, tmp_path: Path) -> None:
    worker = WorkerProcess(dsn, "tests.apps.basic:app", *FAST, log_dir=tmp_path)
    worker.wait_ready()
    [registered] = rows(dsn, "SELECT id FROM taskq.workers")

    result = taskq_cli("health", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: worker {registered['id']} (pid {worker.pid} on ")
    assert taskq_cli("health", "--pid", str(worker.pid), "--dsn", dsn).returncode == 0
    assert taskq_cli("health", "--worker-id", registered["id"], "--dsn", dsn).returncode == 0
    one_line_error(
        taskq_cli("health", "--pid", str(worker.pid + 100000), "--dsn", dsn),
        1,
        f"no worker with pid {worker.pid + 100000}",
    )

    # kill -9: the row stays (only a clean exit removes it) and goes stale after the lease.
    worker.kill()
    wait_until_sync(
        lambda: taskq_cli("health", "--dsn", dsn).returncode == 1,
        timeout=10,
        what="health to notice the dead worker",
    )
    one_line_error(taskq_cli("health", "--dsn", dsn), 1, f"worker {registered['id']} last heart")


@pytest.mark.slow
def test_stale_heartbeat_is_unhealthy_and_the_freshest_worker_counts(dsn: str) -> None:
    add_worker(dsn, "old-incarnation", silent_seconds=3600, pid=1)
    one_line_error(
        taskq_cli("health", "--dsn", dsn), 1, "worker old-incarnation last heart-beat 36"
    )
    one_line_error(taskq_cli("health", "--pid", "1", "--dsn", dsn), 1, "(limit 30s)")

    # A restarted container: same hostname, PID 1 again, a fresh row beside the stale one.
    add_worker(dsn, "new-incarnation", silent_seconds=5, pid=1)
    result = taskq_cli("health", "--pid", "1", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "new-incarnation" in result.stdout
    # --max-silence is stricter than the lease.
    one_line_error(
        taskq_cli("health", "--max-silence", "2", "--dsn", dsn), 1, "new-incarnation last heart"
    )
    one_line_error(
        taskq_cli("health", "--worker-id", "old-incarnation", "--dsn", dsn), 1, "last heart-beat"
    )
