"""Handlers for the dashboard's browser tests (a subprocess worker loads this with --app)."""

from __future__ import annotations

import os
import time
from typing import Any

import taskq

app = taskq.App()


@app.task("dash.ok")
def ok(ctx: taskq.TaskContext, payload: Any) -> None:
    """Succeeds: a dead letter requeued from the page runs to SUCCESS."""


def wait_for(path: str, timeout: float = 20.0) -> None:
    """Block until the test creates ``path`` (so it decides when each step happens)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


@app.task("dash.steps")
def steps(ctx: taskq.TaskContext, payload: Any) -> None:
    """Reports progress only when the test says so, so the page is open before it does."""
    wait_for(payload["go"])
    ctx.progress(50, "halfway")
    wait_for(payload["finish"])


@app.task("dash.forever", timeout=120)
async def forever(ctx: taskq.TaskContext, payload: Any) -> None:
    """Runs until an operator aborts it from the page (the asyncio task is cancelled)."""
    import asyncio

    ctx.progress(10, "waiting to be aborted")
    await asyncio.sleep(120)
