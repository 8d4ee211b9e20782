"""The app the container test mounts into the image (/app/container_tasks.py)."""

from __future__ import annotations

import time
from typing import Any

import taskq

app = taskq.App()


@app.task("container.hello")
def hello(ctx: taskq.TaskContext, payload: Any) -> str:
    return f"hello, {payload.get('name', 'world')}"


@app.task("container.slow", timeout=60)
def slow(ctx: taskq.TaskContext, payload: Any) -> None:
    # Long enough to be in flight when `docker stop` arrives; the drain lets it finish.
    time.sleep(float(payload.get("seconds", 3)))
