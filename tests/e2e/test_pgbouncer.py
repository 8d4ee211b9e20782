"""taskq behind a real PgBouncer in transaction mode.

Transaction pooling hands each transaction whichever server session is free, so anything that
lives in a session breaks: psycopg's server-side prepared statements (after 5 executions of a
statement, by default) and LISTEN. ``taskq worker --pgbouncer`` never prepares, and LISTENs
over ``--listen-dsn`` (a direct connection) or not at all (``--no-listen``).

The PgBouncer here is the Debian package's binary, started per test on a free port with a
pool smaller than the worker's connection count, so server sessions really are shared. Without
pgbouncer installed the tests skip locally and fail under CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import taskq
from tests.support import WorkerProcess, rows, taskq_cli, wait_until_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

FAST = ["--heartbeat-interval", "0.3", "--reaper-interval", "0.3", "--shutdown-timeout", "5"]


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed; CI must run these tests (.ci/run installs it)")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer); CI runs these tests")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One pgbouncer process in transaction mode in front of the test's server."""

    def __init__(self, upstream_dsn: str, *, pool_size: int = 3) -> None:
        binary = pgbouncer_binary()
        upstream = conninfo_to_dict(upstream_dsn)
        self.port = free_port()
        self.upstream_dsn = upstream_dsn
        # Its own folder, readable by the unprivileged user pgbouncer switches to (-u).
        self.folder = Path(tempfile.mkdtemp(prefix="taskq-pgbouncer-"))
        self.folder.chmod(0o755)
        user = str(upstream.get("user") or os.environ.get("USER") or "root")
        users = self.folder / "users.txt"
        users.write_text(f'"{user}" ""\n')
        server = " ".join(
            f"{key}={upstream[key]}" for key in ("host", "port") if upstream.get(key) is not None
        )
        extra = ""
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"PgBouncer (\d+)\.(\d+)", version)
        if found and (int(found.group(1)), int(found.group(2))) >= (1, 21):
            # Newer PgBouncers can track protocol-level prepared statements; switch that off so
            # the test always meets the worst case that --pgbouncer is for.
            extra = "max_prepared_statements = 0\n"
        config = self.folder / "pgbouncer.ini"
        config.write_text(
            f"[databases]\n* = {server}\n\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
            "logfile =\npidfile =\n" + extra
        )
        for path in (users, config):
            path.chmod(0o644)
        self.log_path = self.folder / "pgbouncer.log"
        self._log = self.log_path.open("w")
        # PgBouncer refuses to run as root; -u makes it drop to an unprivileged user. Behind a
        # Unix socket (the embedded server) that user must be able to reach the socket: the
        # owner of the socket's folder.
        host = str(upstream.get("host") or "")
        runs_as = "nobody"
        if host.startswith("/"):
            import pwd

            runs_as = pwd.getpwuid(os.stat(host).st_uid).pw_name
        as_user = ["-u", runs_as] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(
            [binary, *as_user, str(config)], stdout=self._log, stderr=subprocess.STDOUT
        )
        self.dsn = make_conninfo(upstream_dsn, host="127.0.0.1", port=str(self.port))
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited: {self.log_path.read_text()}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as c:
                    c.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def bouncer(dsn: str) -> Iterator[PgBouncer]:
    b = PgBouncer(dsn)
    try:
        yield b
    finally:
        b.stop()


def enqueue_workload(bouncer_dsn: str, *, n: int) -> None:
    """``n`` tasks through PgBouncer in one transaction: mostly plain, one in ten failing its
    first attempt, some parents with children, some exactly-once. The failing ones are one in
    five of their type, far from what opens a circuit breaker (5 in a row, or half of them)."""
    items: list[taskq.EnqueueItem] = []
    for i in range(n):
        kind = i % 10
        if kind == 0:
            items.append(taskq.EnqueueItem("deploy.flaky", {"fail": True}))
        elif kind == 1:
            items.append(taskq.EnqueueItem("deploy.parent", {"i": i}))
        elif kind == 2:
            items.append(taskq.EnqueueItem("deploy.once", {}, biz_id=f"once-{i}"))
        elif kind == 3:
            items.append(taskq.EnqueueItem("deploy.async", {"i": i}))
        elif kind < 6:
            items.append(taskq.EnqueueItem("deploy.sync", {"i": i}))
        else:
            items.append(taskq.EnqueueItem("deploy.flaky", {"fail": False}))
    with psycopg.connect(bouncer_dsn) as c:
        taskq.App().enqueue_many(c, items)
        c.commit()


def check_drained(dsn: str, *, n: int) -> None:
    """Every task (and every child) succeeded, and only the ones meant to fail retried."""
    found = rows(
        dsn,
        "SELECT task_type, status, retry_count, (payload ->> 'fail')::bool AS fail "
        "FROM taskq.tasks WHERE task_type <> 'deploy.tick'",
    )
    assert len(found) == n + n // 10  # the workload plus one child per parent
    assert {r["status"] for r in found} == {"SUCCESS"}
    retried = sorted((r["task_type"], bool(r["fail"]), r["retry_count"]) for r in found)
    assert {(t, f, c) for t, f, c in retried if c} == {("deploy.flaky", True, 1)}
    assert sum(1 for _, f, c in retried if f and c == 1) == n // 10
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.task_executed")[0]["n"] == n // 10


def all_done(dsn: str, total: int) -> bool:
    done = rows(
        dsn,
        "SELECT count(*) AS n FROM taskq.tasks "
        "WHERE status = 'SUCCESS' AND task_type <> 'deploy.tick'",
    )
    return int(done[0]["n"]) >= total


def no_session_errors(worker: WorkerProcess) -> None:
    text = worker.log_path.read_text()
    for symptom in ("prepared statement", "DuplicatePreparedStatement", "InvalidSqlStatementName"):
        assert symptom not in text, text[-4000:]


# --- the failure mode, shown -----------------------------------------------------------------


def test_psycopg_defaults_break_through_transaction_pooling(bouncer: PgBouncer) -> None:
    """Why --pgbouncer exists: with psycopg's default prepare_threshold two clients sharing a
    server session collide on the same prepared-statement name; with None they never do."""

    def errors_with(threshold: int | None) -> list[str]:
        seen: list[str] = []
        with (
            psycopg.connect(bouncer.dsn, autocommit=True, prepare_threshold=threshold) as a,
            psycopg.connect(bouncer.dsn, autocommit=True, prepare_threshold=threshold) as b,
        ):
            for i in range(20):
                for c in (a, b):
                    try:
                        c.execute("SELECT %s::int + 1", (i,)).fetchone()
                    except psycopg.Error as exc:
                        seen.append(type(exc).__name__)
        return seen

    assert errors_with(5), "this pgbouncer does not share server sessions: the tests prove nothing"
    assert errors_with(None) == []


def test_pgbouncer_without_a_direct_listen_is_refused(dsn: str) -> None:
    """A LISTEN through a transaction pooler would silently hear nothing: refuse it."""
    result = taskq_cli("worker", "--app", "tests.apps.deploy:app", "--dsn", dsn, "--pgbouncer")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "--listen-dsn" in result.stderr, result.stderr
    result = taskq_cli(
        "worker", "--app", "tests.apps.deploy:app", "--dsn", dsn, "--no-listen",
        "--listen-dsn", dsn,
    )  # fmt: skip
    assert result.returncode == 1 and "contradict" in result.stderr, result.stderr


# --- a real worker behind it ------------------------------------------------------------------


def test_worker_through_pgbouncer_listens_directly(
    bouncer: PgBouncer, dsn: str, tmp_path: Path
) -> None:
    """Everything through PgBouncer, LISTEN over a direct connection. The poll is a minute, so
    every claim after the first comes from a NOTIFY heard on the direct connection: the
    producers' inserts (through PgBouncer), and a steady trickle of NOTIFYs standing in for more
    producers, which is what brings the retries in once they are due."""
    n = 300
    worker = WorkerProcess(
        bouncer.dsn, "tests.apps.deploy:app", *FAST, "--pgbouncer", "--listen-dsn", dsn,
        "--poll-interval", "60", log_dir=tmp_path,
    )  # fmt: skip
    worker.wait_event("worker_ready")
    enqueue_workload(bouncer.dsn, n=n)

    stop = threading.Event()

    def trickle() -> None:
        # The same statement again and again: through PgBouncer, never prepared.
        with psycopg.connect(bouncer.dsn, autocommit=True, prepare_threshold=None) as c:
            while not stop.wait(0.3):
                c.execute("SELECT pg_notify('taskq_tasks', '[\"default\"]')")

    nudger = threading.Thread(target=trickle, daemon=True)
    nudger.start()
    try:
        wait_until_sync(lambda: all_done(dsn, n + n // 10), timeout=50, what="the workload drained")
    finally:
        stop.set()
        nudger.join(5)
    check_drained(dsn, n=n)
    assert worker.stop() == 0
    no_session_errors(worker)


def test_worker_through_pgbouncer_without_listen_polls(
    bouncer: PgBouncer, dsn: str, tmp_path: Path
) -> None:
    n = 300
    worker = WorkerProcess(
        bouncer.dsn, "tests.apps.deploy:app", *FAST, "--pgbouncer", "--no-listen",
        "--poll-interval", "0.2", log_dir=tmp_path,
    )  # fmt: skip
    worker.wait_event("worker_ready")
    enqueue_workload(bouncer.dsn, n=n)
    wait_until_sync(lambda: all_done(dsn, n + n // 10), timeout=60, what="the workload drained")
    check_drained(dsn, n=n)
    listening: list[dict[str, Any]] = rows(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
        (f"taskq-listen-{worker.pid}",),
    )
    assert listening == []
    assert worker.stop() == 0
    no_session_errors(worker)
