"""An app for the deployment tests (roles, PgBouncer, health): it touches every table and
connection a worker uses, so a missing privilege or a session-bound statement shows up as a
task that does not reach SUCCESS.

- ``deploy.async`` / ``deploy.sync``: the plain path (claim, complete), sync in the queue's
  threads; both report progress (the pooled connections).
- ``deploy.flaky``: with ``{"fail": true}`` fails its first attempt and succeeds on the retry
  (mark_failed, then a claim of a FAILED row). Mix failing ones among many that succeed: five
  failures of one type in a row would open its circuit breaker and hold the retries back.
- ``deploy.parent``: a sync handler that saves a checkpoint and enqueues a child task through
  the handler pool (runtime's sync connections).
- ``deploy.once``: idempotent (taskq.task_executed in the handler's transaction).
- ``deploy.block_first``: stuck on its first attempt, so a test can kill the worker and watch
  the reaper of another worker rescue it.
- a periodic schedule ``deploy.tick`` every second (taskq.schedules, schedule_ticks).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import taskq

app = taskq.App()

FAST_RETRY: dict[str, Any] = {"retry_delay": 0.1, "retry_jitter": 0.1}


@app.task("deploy.async", **FAST_RETRY)
async def run_async(ctx: taskq.TaskContext, payload: Any) -> None:
    ctx.progress(50, "half way")
    await asyncio.sleep(0)


@app.task("deploy.sync", **FAST_RETRY)
def run_sync(ctx: taskq.TaskContext, payload: Any) -> None:
    ctx.progress(50)


@app.task("deploy.flaky", **FAST_RETRY)
async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
    if ctx.attempt == 0 and payload.get("fail"):
        raise RuntimeError("first attempt fails on purpose")


@app.task("deploy.parent", **FAST_RETRY)
def parent(ctx: taskq.TaskContext, payload: Any) -> None:
    ctx.checkpoint("spawned", at=ctx.attempt)
    ctx.enqueue("deploy.async", {"from": ctx.task_id})


@app.task("deploy.once", idempotent=True, **FAST_RETRY)
def once(ctx: taskq.TaskContext, payload: Any) -> None:
    pass


@app.task("deploy.block_first", timeout=600, **FAST_RETRY)
def block_first(ctx: taskq.TaskContext, payload: Any) -> None:
    if ctx.attempt == 0:
        time.sleep(payload["seconds"])


@app.periodic("every 1s", task_type="deploy.tick")
async def tick(ctx: taskq.TaskContext, payload: Any) -> None:
    pass
