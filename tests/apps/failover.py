"""Handlers for the failover test: quick tasks, and idempotent tasks whose business effect (a row
in ``effects``) commits with the task's SUCCESS in one transaction, or not at all."""

from __future__ import annotations

from typing import Any

import taskq

app = taskq.App()


@app.task("fo.quick", timeout=5, retry_delay=0.2, retry_jitter=0.1)
async def quick(ctx: taskq.TaskContext, payload: Any) -> None:
    pass


@app.task("fo.effect", idempotent=True, timeout=5, retry_delay=0.2, retry_jitter=0.1)
def effect(ctx: taskq.TaskContext, payload: Any) -> None:
    ctx.conn.execute(
        "INSERT INTO effects (n, task_id) VALUES (%s, %s)", (payload["n"], ctx.task_id)
    )
