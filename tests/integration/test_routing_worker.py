"""End to end: a worker registers its types at start, so a bare SQL insert that names no queue
lands in the type's queue and runs there (it used to land in 'default' and never run)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import taskq
from tests.support import rows


async def test_bare_insert_runs_on_a_worker_serving_only_the_types_queue(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    ran = asyncio.Event()

    @app.task("sms.notify", queue="sms", max_retry_count=2, timeout=20)
    async def notify(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.set()

    await worker_factory(app, queues={"sms": 2})
    registry = rows(dsn, "SELECT task_type, queue, max_retry_count FROM taskq.task_types")
    assert registry == [{"task_type": "sms.notify", "queue": "sms", "max_retry_count": 2}]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload) VALUES ('sms.notify', '{}')"
        )
    await asyncio.wait_for(ran.wait(), timeout=10)
    [task] = rows(dsn, "SELECT queue, timeout_seconds FROM taskq.tasks")
    assert task == {"queue": "sms", "timeout_seconds": 20}
