"""taskq.testing as a user's suite uses it: the plugin's taskq_dsn fixture, drain, and the
enqueue assertions."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

import taskq
from taskq.testing import adrain, assert_enqueued, drain, refute_enqueued


def flaky_app() -> tuple[taskq.App, list[int]]:
    app = taskq.App()
    attempts: list[int] = []

    @app.task("charge", max_retry_count=3)
    def charge(ctx: taskq.TaskContext, payload: Any) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 0:
            raise ConnectionError("card network hiccup")
        ctx.enqueue("receipt", {"order": payload["order"]})
        return "charged"

    @app.task("receipt")
    def receipt(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    @app.task("always.fails", max_retry_count=1)
    def always_fails(ctx: taskq.TaskContext, payload: Any) -> None:
        raise ValueError("no")

    return app, attempts


def test_a_handler_that_fails_once_then_succeeds(taskq_dsn: str) -> None:
    app, attempts = flaky_app()
    began = time.monotonic()
    with psycopg.connect(taskq_dsn) as conn:
        task_id = app.enqueue(conn, "charge", {"order": 7}, biz_id="order-7")
        assert_enqueued(conn, "charge", biz_id="order-7", payload={"order": 7})
    result = drain(app, taskq_dsn)
    elapsed = time.monotonic() - began
    assert attempts == [0, 1]
    assert result.failed == [task_id] and result.dead_lettered == []
    child = [t for t in result.tasks if t["task_type"] == "receipt"]
    assert len(child) == 1 and child[0]["status"] == "SUCCESS"  # until_empty: children run too
    assert sorted(result.succeeded) == sorted([task_id, child[0]["id"]])
    refute_enqueued(taskq_dsn, "charge")
    # The bar is 1 s (about 0.3 s on an idle machine); the margin is for a loaded CI.
    assert elapsed < 2.0, f"enqueue + drain took {elapsed:.2f}s"
    print(f"enqueue + drain of a fail-once task and its child: {elapsed:.3f}s")


def test_dead_letters_and_only_what_was_due(taskq_dsn: str) -> None:
    app, _ = flaky_app()
    with psycopg.connect(taskq_dsn) as conn:
        doomed = app.enqueue(conn, "always.fails")
        later = app.enqueue(conn, "receipt", delay=3600)
    result = drain(app, taskq_dsn, until_empty=False)
    assert result.dead_lettered == [doomed] and result.failed == [doomed]
    assert "card" not in (result.tasks[0]["last_error"] or "")
    assert_enqueued(taskq_dsn, "receipt", id=later)  # not due: left alone


def test_without_retries_a_failed_task_waits(taskq_dsn: str) -> None:
    app, attempts = flaky_app()
    with psycopg.connect(taskq_dsn) as conn:
        task_id = app.enqueue(conn, "charge", {"order": 1})
    result = drain(app, taskq_dsn, run_retries=False)
    assert attempts == [0]
    assert result.still_failing == [task_id] and result.succeeded == []


async def test_adrain_in_an_async_test(taskq_dsn: str) -> None:
    app, _ = flaky_app()
    async with await psycopg.AsyncConnection.connect(taskq_dsn) as conn:
        await app.enqueue(conn, "receipt")
    with pytest.raises(taskq.TaskqError, match="adrain"):
        drain(app, taskq_dsn)
    result = await adrain(app, taskq_dsn)
    assert len(result.succeeded) == 1


def test_assertions_say_what_is_there(taskq_dsn: str) -> None:
    app, _ = flaky_app()
    with psycopg.connect(taskq_dsn) as conn:
        app.enqueue(conn, "receipt", {"order": 1}, biz_id="r-1")
        with pytest.raises(AssertionError, match="r-1"):
            assert_enqueued(conn, "receipt", biz_id="r-2")
        with pytest.raises(AssertionError, match="1 live 'receipt'"):
            refute_enqueued(conn, "receipt", biz_id="r-1")
        with pytest.raises(TypeError, match="colour"):
            assert_enqueued(conn, "receipt", colour="red")
        conn.rollback()
    refute_enqueued(taskq_dsn, "receipt")
