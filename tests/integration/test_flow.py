"""Flow control with real workers: the cap holds across workers racing to claim, a freed slot is
taken at once, and the Python API carries the limits and the concurrency key."""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import all_in, rows, wait_until


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end at the same instant as a start comes first)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def capped_app(cap: int, seconds: float, spans: list[tuple[float, float]]) -> taskq.App:
    app = taskq.App()

    @app.task("flow.capped", max_running=cap)
    async def capped(ctx: taskq.TaskContext, payload: Any) -> None:
        start = time.monotonic()
        await asyncio.sleep(seconds)
        spans.append((start, time.monotonic()))

    @app.task("flow.free")
    async def free(ctx: taskq.TaskContext, payload: Any) -> None:
        await asyncio.sleep(seconds)

    return app


@pytest.mark.slow
@pytest.mark.parametrize("cap", [1, 2])
async def test_cap_holds_with_many_workers_racing(dsn: str, worker_factory: Any, cap: int) -> None:
    """Four workers of four slots each, woken together by every enqueue and by every freed slot:
    at no instant do more than `cap` handlers run (spans recorded by the handler itself, which
    runs strictly inside its attempt's PROCESSING time)."""
    spans: list[tuple[float, float]] = []
    app = capped_app(cap, 0.01, spans)
    for _ in range(4):
        await worker_factory(app, queues={"default": 4}, poll_interval_seconds=0.05)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(10):  # ten separate commits: ten NOTIFYs, every worker claims each time
            app.enqueue_many(conn, [{"task_type": "flow.capped"}] * 6)
            app.enqueue_many(conn, [{"task_type": "flow.free"}] * 6)
    await wait_until(all_in(dsn, {"SUCCESS"}), timeout=60, what="all tasks done")
    assert len(spans) == 60
    assert max_overlap(spans) == cap


@pytest.mark.slow
async def test_a_freed_slot_is_taken_at_once(dsn: str, worker_factory: Any) -> None:
    """max_running=1: the worker that finishes wakes its own claimer after the completion
    commits, so the tasks run back to back, not one per poll interval."""
    spans: list[tuple[float, float]] = []
    app = capped_app(1, 0.01, spans)
    for _ in range(3):
        await worker_factory(app, queues={"default": 4}, poll_interval_seconds=5.0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        app.enqueue_many(conn, [{"task_type": "flow.capped"}] * 20)
    await wait_until(all_in(dsn, {"SUCCESS"}), timeout=30, what="all tasks done")
    spans.sort()
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(spans)]
    assert min(gaps) >= 0, "never two at once"
    assert statistics.median(gaps) < 0.05, gaps


@pytest.mark.slow
async def test_code_limits_are_declared_and_operator_limits_win(
    dsn: str, worker_factory: Any
) -> None:
    from taskq.ops import limits as limits_ops

    app = taskq.App()

    @app.task("sms.send", rate="20/s", max_running=4)
    async def send(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    @app.task("tenant.sync", max_running_per_key=1, fair=True)
    async def sync(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    handle = await worker_factory(app)
    found = {r["task_type"]: r for r in limits_ops.list_limits(dsn)["task_types"]}
    assert found["sms.send"]["rate_text"] == "20/s" and found["sms.send"]["burst"] == 20
    assert found["sms.send"]["max_running"] == 4 and found["sms.send"]["source"] == "code"
    assert found["tenant.sync"]["fair"] and found["tenant.sync"]["max_running_per_key"] == 1
    limits_ops.set_limits(dsn, "sms.send", limits_ops.LimitChange(rate="5/s"), by="ops")
    await handle.stop()
    await worker_factory(app)  # a restart does not undo the operator's change
    found = {r["task_type"]: r for r in limits_ops.list_limits(dsn)["task_types"]}
    assert found["sms.send"]["rate_text"] == "5/s" and found["sms.send"]["source"] == "operator"


async def test_concurrency_key_through_the_api(dsn: str) -> None:
    app = taskq.App()

    @app.task("tenant.sync")
    def sync(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    with psycopg.connect(dsn, autocommit=True) as conn:
        one = sync.enqueue(conn, {}, concurrency_key="tenant-1")
        many = app.enqueue_many(
            conn,
            [
                {"task_type": "tenant.sync", "concurrency_key": "tenant-2"},
                taskq.EnqueueItem("tenant.sync", concurrency_key="tenant-3"),
            ],
        )
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        later = await app.aenqueue(aconn, "tenant.sync", concurrency_key="tenant-4")
    keys = rows(
        dsn,
        "SELECT concurrency_key FROM taskq.tasks WHERE id = ANY(%s) ORDER BY id",
        ([one, *many, later],),
    )
    assert [r["concurrency_key"] for r in keys] == ["tenant-1", "tenant-2", "tenant-3", "tenant-4"]
    with psycopg.connect(dsn) as conn, pytest.raises(taskq.InvalidTask):
        sync.enqueue(conn, {}, concurrency_key="")


def test_bad_limits_fail_at_registration() -> None:
    app = taskq.App()
    for bad in ({"max_running": 0}, {"rate": "fast"}, {"burst": 5}, {"max_running_per_key": -1}):
        with pytest.raises(taskq.ConfigError):
            app.task("x", **bad)


@pytest.mark.slow
def test_limits_cli(dsn: str) -> None:
    from tests.support import taskq_cli

    done = taskq_cli("limits", "set", "report.build", "--max-running", "3", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert "max_running=3" in done.stdout
    done = taskq_cli("limits", "set", "sms.send", "--rate", "20/s", "--note", "x", "--dsn", dsn)
    assert done.returncode == 0 and "rate=20/s burst=20" in done.stdout, done.stderr
    listed = taskq_cli("limits", "--json", "--dsn", dsn)
    found = {r["task_type"]: r for r in json.loads(listed.stdout)["task_types"]}
    assert found["report.build"]["max_running"] == 3 and found["sms.send"]["rate"] == 20
    table = taskq_cli("limits", "--dsn", dsn)
    assert "report.build" in table.stdout and "20/s" in table.stdout
    cleared = taskq_cli("limits", "set", "sms.send", "--rate", "none", "--dsn", dsn)
    assert "rate=none" in cleared.stdout, cleared.stderr
    share = taskq_cli("limits", "queue", "default", "--retry-share", "0.25", "--dsn", dsn)
    assert share.returncode == 0 and "0.25" in share.stdout
    audit = rows(dsn, "SELECT action FROM taskq.audit ORDER BY id")
    assert [a["action"] for a in audit] == [
        "limits_set",
        "limits_set",
        "limits_set",
        "queue_limits_set",
    ]
    for bad, text in (
        (["--rate", "fast"], "rate must look like"),
        (["--max-running", "x"], "whole number"),
        ([], "nothing to set"),
    ):
        result = taskq_cli("limits", "set", "t", *bad, "--dsn", dsn)
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and text in lines[0] and "Traceback" not in result.stderr


@pytest.mark.slow
def test_limited_tasks_are_visible_in_stats_and_dashboard(dsn: str) -> None:
    from taskq.dashboard.views import overview
    from taskq.ops import limits as limits_ops
    from taskq.ops.stats import report
    from tests.support import taskq_cli

    limits_ops.set_limits(dsn, "report.build", limits_ops.LimitChange(max_running=1), by="ops")
    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status, started_at, retry_count, next_retry_time)"
        " VALUES ('report.build', 'PROCESSING', now(), 0, NULL),"
        " ('report.build', 'FAILED', NULL, 1, now() - interval '1 minute'),"
        " ('report.build', 'PENDING', NULL, 0, NULL), ('report.build', 'PENDING', NULL, 0, NULL)"
        " RETURNING id",
    )
    found = report(dsn)
    [t] = found.types
    assert t.limits is not None and t.limits["held"] == 3 and t.limits["running"] == 1
    assert t.backlog["retry_due"] == 1 and t.oldest_retry_seconds is not None
    view = overview(found)
    [row] = view["tables"]["limits"]
    assert [c["text"] for c in row["cells"]][:2] == ["report.build", "1 / 1"]
    assert row["cells"][-1]["value"] == 3
    text = taskq_cli("stats", "--dsn", dsn).stdout
    assert "limited 3" in text and "1/1" in text
