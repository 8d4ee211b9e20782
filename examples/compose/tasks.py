"""The example app the compose worker runs (mounted at /app/tasks.py; TASKQ_APP=tasks:app)."""

from __future__ import annotations

from typing import Any

import taskq

app = taskq.App()


@app.task("example.hello", max_retry_count=3, timeout=30)
def hello(ctx: taskq.TaskContext, payload: Any) -> None:
    ctx.progress(100, f"hello, {payload.get('name', 'world')}")
