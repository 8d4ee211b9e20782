"""The app of the README's "Your first worker": one task type, with progress and retries."""

from __future__ import annotations

import asyncio
from typing import Any

import taskq

app = taskq.App()


@app.task("hello.greet", max_retry_count=3, retry_delay=1)
async def greet(ctx: taskq.TaskContext, payload: Any) -> None:
    name = payload["name"]
    if not isinstance(name, str) or not name:
        raise taskq.Permanent("payload needs a non-empty 'name'")  # no retry: bad input
    ctx.progress(50, f"greeting {name}")  # stored on the row, shown by `taskq watch`
    await asyncio.sleep(0.5)
    print(f"hello, {name}", flush=True)
