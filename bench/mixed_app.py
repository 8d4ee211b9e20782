"""The handlers of the mixed chaos run (bench/mixed.py). Each run that gets past its start
records an effect row in ``bench.effects`` (task id, biz_id, pid, attempt): an idempotent type
writes it in the handler's own transaction (``ctx.conn``), so two rows for one biz_id would be
a duplicated effect; the others write it on a pooled connection (at least once)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import taskq

app = taskq.App()

FAST = {"retry_delay": 0.2, "retry_jitter": 0.2, "max_retry_count": 3}
_EFFECT = "INSERT INTO bench.effects (task_id, biz_id, pid, attempt) VALUES (%s, %s, %s, %s)"


async def _effect(ctx: taskq.TaskContext) -> None:
    async with ctx.aconnection() as conn:
        await conn.execute(_EFFECT, (ctx.task_id, ctx.biz_id, os.getpid(), ctx.attempt))


@app.task("mixed.ok", **FAST)
async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
    await asyncio.sleep(payload.get("sleep", 0.005))
    await _effect(ctx)


@app.task("mixed.sync", **FAST)
def sync_ok(ctx: taskq.TaskContext, payload: Any) -> None:
    time.sleep(payload.get("sleep", 0.005))
    with ctx.connection() as conn:
        conn.execute(_EFFECT, (ctx.task_id, ctx.biz_id, os.getpid(), ctx.attempt))


@app.task("mixed.idempotent", idempotent=True, **FAST)
def idempotent(ctx: taskq.TaskContext, payload: Any) -> None:
    """The effect commits with the business key and the SUCCESS, or not at all."""
    time.sleep(payload.get("sleep", 0.005))
    ctx.conn.execute(_EFFECT, (ctx.task_id, ctx.biz_id, os.getpid(), ctx.attempt))


@app.task("mixed.flaky", **FAST)
async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
    """One in four fails its first attempt, then succeeds (a failure rate under the breaker's)."""
    if ctx.attempt == 0 and ctx.task_id % 4 == 0:
        raise ConnectionError("downstream hiccup")
    await _effect(ctx)


@app.task("mixed.failing", retry_delay=0.2, retry_jitter=0.2, max_retry_count=1)
async def failing(ctx: taskq.TaskContext, payload: Any) -> None:
    """Fails every attempt: opens its breaker (its tasks then go one probe per cool-down) and
    ends DEAD_LETTER after its retry."""
    raise RuntimeError("always fails")


@app.task("mixed.bad_input", **FAST)
async def bad_input(ctx: taskq.TaskContext, payload: Any) -> None:
    """A permanent error: DEAD_LETTER at once, no retry."""
    raise taskq.Permanent("malformed order")


@app.task("mixed.timeout", timeout=1, **FAST)
async def times_out(ctx: taskq.TaskContext, payload: Any) -> None:
    """One in four overruns its 1 s timeout on the first attempt; all succeed after."""
    if ctx.attempt == 0 and ctx.task_id % 4 == 0:
        await asyncio.sleep(5)
    await _effect(ctx)


@app.task("mixed.poison", **FAST)
def poison(ctx: taskq.TaskContext, payload: Any) -> None:
    """Kills its own process every time, whoever else runs there."""
    time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
