"""A handler that reports progress, for `taskq watch` tests."""

from __future__ import annotations

import time
from typing import Any

import taskq

app = taskq.App()


@app.task("ops.report")
def report(ctx: taskq.TaskContext, payload: Any) -> None:
    steps = payload["steps"]
    for step in range(1, steps + 1):
        time.sleep(0.4)  # the work; the watcher sees each step live
        ctx.progress(100 * step / steps, f"step {step}/{steps}")
