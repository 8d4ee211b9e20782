"""Handlers for the fault tests, driven by their payload. Each run is recorded first, as
``<task_id> <pid> <attempt>`` appended to $TASKQ_TEST_RUNS_DIR/runs-<pid>.log."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import taskq
from tests.apps.basic import record

app = taskq.App()


@app.task("fault.record", retry_delay=0.2, retry_jitter=0.1)
async def record_run(ctx: taskq.TaskContext, payload: Any) -> None:
    record(ctx)
    if payload and payload.get("sleep"):
        await asyncio.sleep(payload["sleep"])


@app.task("fault.block_first", timeout=600, retry_delay=0.2, retry_jitter=0.1)
def block_first(ctx: taskq.TaskContext, payload: Any) -> None:
    """A sync handler that is stuck on its first attempt (to be killed or frozen)."""
    record(ctx)
    if ctx.attempt == 0:
        time.sleep(payload["seconds"])


@app.task("fault.wedge_first", timeout=1, retry_delay=0.2, retry_jitter=0.1)
async def wedge_first(ctx: taskq.TaskContext, payload: Any) -> None:
    """An async handler that blocks its event loop on the first attempt, far past its timeout,
    then finishes 'successfully': the owner cannot enforce the timeout while wedged."""
    record(ctx)
    if ctx.attempt == 0:
        time.sleep(payload["seconds"])  # noqa: ASYNC251 - wedging the loop is the point


@app.task("fault.sync_span", timeout=60)
def sync_span(ctx: taskq.TaskContext, payload: Any) -> None:
    """A sync handler that records when each run starts and ends (wall clock, one machine):
    ``<task_id> <pid> start|end <time>`` in $TASKQ_TEST_RUNS_DIR/spans-<pid>.log."""
    span(ctx, "start")
    time.sleep(payload["seconds"])
    span(ctx, "end")


def span(ctx: taskq.TaskContext, edge: str) -> None:
    folder = os.environ["TASKQ_TEST_RUNS_DIR"]
    line = f"{ctx.task_id} {os.getpid()} {edge} {time.time():.6f}\n".encode()
    fd = os.open(
        os.path.join(folder, f"spans-{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task("fault.poison", max_retry_count=2, retry_delay=0.2, retry_jitter=0.1)
def poison(ctx: taskq.TaskContext, payload: Any) -> None:
    """Kills whichever worker runs it, every time."""
    record(ctx)
    os._exit(17)


@app.task("fault.long", timeout=600)
async def long(ctx: taskq.TaskContext, payload: Any) -> None:
    record(ctx)
    await asyncio.sleep(payload["seconds"])


@app.task("fault.big")
async def big(ctx: taskq.TaskContext, payload: Any) -> None:
    if len(payload["blob"]) != payload["size"]:
        raise taskq.Permanent("payload was truncated")
    record(ctx)
