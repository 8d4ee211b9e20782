"""Apps that subprocess workers load with --app (tests only).

Handlers record each run by appending ``<task_id> <pid>`` to a file in $TASKQ_TEST_RUNS_DIR
(one small O_APPEND write per run: atomic, no database round trip of its own).
"""

from __future__ import annotations

import os
from typing import Any

import taskq

app = taskq.App()


def record(ctx: taskq.TaskContext) -> None:
    folder = os.environ["TASKQ_TEST_RUNS_DIR"]
    line = f"{ctx.task_id} {os.getpid()} {ctx.attempt}\n".encode()
    fd = os.open(
        os.path.join(folder, f"runs-{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task("test.record")
async def record_async(ctx: taskq.TaskContext, payload: Any) -> None:
    record(ctx)


@app.task("test.record_sync")
def record_sync(ctx: taskq.TaskContext, payload: Any) -> None:
    record(ctx)


not_an_app = object()
