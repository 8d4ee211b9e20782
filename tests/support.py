"""Helpers shared by the tests: waiting on the database, running workers, CLI calls."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
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
    return [str(script)] if script.exists() else [sys.executable, "-m", "taskq.cli"]


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


def spawn_worker(
    dsn: str, app: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*taskq_command(), "worker", "--app", app, "--dsn", dsn, "--log-format", "json", *extra],
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
