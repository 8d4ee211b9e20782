"""Helpers for *your* test suite: run your tasks for real, assert on what was enqueued.

``drain`` runs an in-process worker (the real claim and completion SQL, your real handlers)
until no due task of the app is left, and tells what happened::

    result = drain(app, dsn)
    assert result.succeeded == [task_id]

``assert_enqueued`` / ``refute_enqueued`` look at the live tasks in a connection (so they see
uncommitted work in that transaction too). The pytest plugin (``taskq.testing.plugin``, loaded
automatically when taskq is installed) gives each test a migrated database of its own:
the ``taskq_dsn`` fixture.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from taskq.app import App
from taskq.db import store
from taskq.errors import TaskqError

__all__ = ["DrainResult", "adrain", "assert_enqueued", "drain", "refute_enqueued"]

_POLL_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class DrainResult:
    """What a drain did, by task id (ascending). A task that failed and then succeeded on a
    retry is in both ``failed`` and ``succeeded``."""

    succeeded: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    """Tasks with at least one failed attempt (retries included), whatever their end."""
    dead_lettered: list[int] = field(default_factory=list)
    still_failing: list[int] = field(default_factory=list)
    """FAILED, waiting for a retry (``run_retries=False``)."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """Every task touched, as it ended: id, task_type, status, retry_count, last_error, biz_id,
    payload."""


def drain(
    app: App,
    dsn: str | None = None,
    *,
    until_empty: bool = True,
    run_retries: bool = True,
    timeout_seconds: float = 30.0,
) -> DrainResult:
    """Run every due task of ``app`` in this process, then return what happened.

    ``until_empty``: keep going while handlers enqueue more (children, follow-ups); False runs
    only what was due when the drain started. ``run_retries``: a failed attempt's retry runs at
    once instead of after its backoff (``retry_count`` and ``last_error`` are kept), so a task
    ends SUCCESS or DEAD_LETTER. ``dsn`` defaults to the app's (then ``TASKQ_DSN``, then the
    embedded server). Raises ``TimeoutError`` when the work is not done within
    ``timeout_seconds``. For async tests: ``await adrain(...)``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(
            adrain(
                app,
                dsn,
                until_empty=until_empty,
                run_retries=run_retries,
                timeout_seconds=timeout_seconds,
            )
        )
    raise TaskqError("drain() inside a running event loop: use 'await taskq.testing.adrain(...)'")


async def adrain(
    app: App,
    dsn: str | None = None,
    *,
    until_empty: bool = True,
    run_retries: bool = True,
    timeout_seconds: float = 30.0,
) -> DrainResult:
    """``drain`` for async tests."""
    from taskq.db.dsn import resolve_dsn
    from taskq.worker import Worker, WorkerSettings

    url = resolve_dsn(dsn or app.dsn)
    types = sorted(app.tasks)
    # One connection watches the work (in a thread: the store's statements are sync).
    watch: psycopg.Connection[Any] = await asyncio.to_thread(_connect, url)
    try:
        since = await asyncio.to_thread(store.drain_clock, watch)
        only = None if until_empty else await asyncio.to_thread(store.drain_due_ids, watch, types)
        settings = WorkerSettings(
            poll_interval_seconds=_POLL_SECONDS,
            listen=False,  # it polls every 10 ms: no LISTEN connection to set up
            shutdown_timeout_seconds=timeout_seconds,
            reaper_interval_seconds=3600.0,
            gauge_interval_seconds=3600.0,
        )
        worker = Worker(app, dsn=url, settings=settings)
        running = asyncio.create_task(worker.run(), name="taskq-drain")
        deadline = time.monotonic() + timeout_seconds
        try:
            while not await asyncio.to_thread(_done, watch, types, only, run_retries):
                if running.done():
                    running.result()  # the worker's startup error
                    raise TaskqError("the drain's worker stopped")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"drain: tasks still due after {timeout_seconds}s")
                await asyncio.sleep(_POLL_SECONDS)
        finally:
            worker.request_stop()
            await running
        return await asyncio.to_thread(_result, watch, types, since)
    finally:
        await asyncio.to_thread(watch.close)


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def _done(
    conn: psycopg.Connection[Any], types: list[str], only: list[int] | None, run_retries: bool
) -> bool:
    if run_retries:
        store.drain_make_retries_due(conn, types)
    return store.drain_pending(conn, types, only, retries=run_retries) == 0


def _result(conn: psycopg.Connection[Any], types: list[str], since: Any) -> DrainResult:
    tasks = store.drain_outcomes(conn, types, since)
    return DrainResult(
        succeeded=[t["id"] for t in tasks if t["status"] == "SUCCESS"],
        failed=[t["id"] for t in tasks if t["retry_count"] > 0 or t["status"] == "DEAD_LETTER"],
        dead_lettered=[t["id"] for t in tasks if t["status"] == "DEAD_LETTER"],
        still_failing=[t["id"] for t in tasks if t["status"] == "FAILED"],
        tasks=tasks,
    )


def _matching(
    conn: psycopg.Connection[Any], task_type: str, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    found = store.enqueued_of_type(conn, task_type)
    unknown = set(fields) - (set(found[0]) if found else set(_FIELDS))
    if unknown:
        raise TypeError(f"unknown task field(s): {', '.join(sorted(unknown))}")
    return [row for row in found if all(row[k] == v for k, v in fields.items())]


_FIELDS = (
    *("id", "task_type", "queue", "biz_id", "payload", "priority", "status", "scheduled_at"),
    *("trace_id", "unique_key", "ordering_key", "parent_id", "retry_count"),
)


def assert_enqueued(
    conn: psycopg.Connection[Any] | str, task_type: str, **fields: Any
) -> dict[str, Any]:
    """Assert that a live task of ``task_type`` has these column values (``payload={...}``,
    ``biz_id=...``, ``queue=...``, ``priority=...``); return the first such row. ``conn`` is a
    psycopg connection (its transaction's uncommitted tasks count) or a DSN."""
    found = _lookup(conn, task_type, fields)
    if not found:
        raise AssertionError(
            f"no live {task_type!r} task with {fields!r}; live ones: {_summary(conn, task_type)}"
        )
    return found[0]


def refute_enqueued(conn: psycopg.Connection[Any] | str, task_type: str, **fields: Any) -> None:
    """Assert that no live task of ``task_type`` has these column values."""
    found = _lookup(conn, task_type, fields)
    if found:
        ids = [row["id"] for row in found]
        raise AssertionError(f"{len(found)} live {task_type!r} task(s) with {fields!r}: {ids}")


def _lookup(
    conn: psycopg.Connection[Any] | str, task_type: str, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True, row_factory=dict_row) as own:
            return _matching(own, task_type, fields)
    return _matching(conn, task_type, fields)


def _summary(conn: psycopg.Connection[Any] | str, task_type: str) -> list[dict[str, Any]]:
    rows = _lookup(conn, task_type, {})
    return [{"id": r["id"], "biz_id": r["biz_id"], "payload": r["payload"]} for r in rows[:5]]
