"""Business switches as handlers see them: ctx.switch() is served from the worker's cache,
which NOTIFY refreshes; turning a switch off reaches a running handler within a second without
a query per call."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import taskq
from taskq.ops import switches
from tests.support import status_of, wait_until


async def test_switch_off_reaches_a_running_handler_within_a_second_without_queries(
    dsn: str, worker_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = taskq.App(dsn=dsn)
    started = threading.Event()
    stop = threading.Event()
    seen_off: list[float] = []
    calls = [0]

    @app.task("sms.batch", timeout=60)
    def batch(ctx: taskq.TaskContext, payload: Any) -> None:
        assert ctx.switch("sms.sending") is True  # never set: on
        assert ctx.switch("sms.beta", default=False) is False  # a declared default
        started.set()
        while not stop.is_set():
            calls[0] += 1
            if not ctx.switch("sms.sending"):
                seen_off.append(time.monotonic())
                return
            time.sleep(0.001)

    statements = [0]
    for cls in (psycopg.Cursor, psycopg.AsyncCursor):
        original = cls.execute

        def counting(self: Any, *args: Any, __original: Any = original, **kw: Any) -> Any:
            statements[0] += 1
            return __original(self, *args, **kw)

        monkeypatch.setattr(cls, "execute", counting)

    with psycopg.connect(dsn, autocommit=True) as conn:
        task_id = app.enqueue(conn, "sms.batch", {})
    # The fallback poll is slower than the bound, so only NOTIFY can meet it.
    await worker_factory(app, control_interval_seconds=5.0)
    try:
        assert await asyncio.to_thread(started.wait, 10)
        # A second of a handler reading the switch in a loop, against every statement this
        # process ran meanwhile (claim polls, control refreshes, heartbeats).
        calls_before, statements_before = calls[0], statements[0]
        await asyncio.sleep(1.0)
        handler_calls = calls[0] - calls_before
        process_statements = statements[0] - statements_before
        turned = time.monotonic()
        await asyncio.to_thread(
            switches.switch_set, dsn, "sms.sending", False, note="provider incident"
        )
        await wait_until(lambda: bool(seen_off), timeout=5, what="the handler to see it off")
    finally:
        stop.set()
    assert seen_off[0] - turned < 1.0
    assert handler_calls > 200, handler_calls
    assert process_statements < 20, (process_statements, handler_calls)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="SUCCESS")


def test_app_switch_reads_in_the_callers_connection(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert app.switch(conn, "mail.sending") is True
        assert app.switch(conn, "mail.sending", default=False) is False
        switches.switch_set(dsn, "mail.sending", False)
        assert app.switch(conn, "mail.sending") is False


async def test_app_switch_async(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    switches.switch_set(dsn, "push.sending", False)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await app.switch(conn, "push.sending") is False
