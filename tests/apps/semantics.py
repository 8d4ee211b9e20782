"""Handlers for the task-semantics tests (subprocess workers load this with --app)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

import taskq
from tests.apps.basic import record

app = taskq.App()


def note(line: str) -> None:
    """Append a line to $TASKQ_TEST_RUNS_DIR/stages-<pid>.log (what ran, in order)."""
    folder = os.environ["TASKQ_TEST_RUNS_DIR"]
    fd = os.open(
        os.path.join(folder, f"stages-{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@app.task("sem.stages", retry_delay=0.1, retry_jitter=0.05)
def four_stages(ctx: taskq.TaskContext, payload: Any) -> None:
    """Four stages; on the first attempt it hangs after stage 2 (to be killed)."""
    stages = ["fetch", "transform", "render", "upload"]
    done = stages.index(ctx.stage) + 1 if ctx.stage else 0
    for number, stage in enumerate(stages[done:], start=done + 1):
        note(f"{ctx.task_id} {ctx.attempt} {stage}")
        ctx.checkpoint(stage, **{f"{stage}_by": os.getpid()})
        if number == 2 and ctx.attempt == 0:
            time.sleep(300)


@app.task("sem.points", idempotent=True, retry_delay=0.1, retry_jitter=0.05)
def add_points(ctx: taskq.TaskContext, payload: Any) -> None:
    """Exactly-once business effect: the UPDATE commits with the task's SUCCESS, or not."""
    record(ctx)
    ctx.conn.execute(
        "UPDATE accounts SET points = points + %s WHERE id = %s",
        (payload["points"], payload["account"]),
    )
    if ctx.attempt == 0 and payload.get("hang_first"):
        time.sleep(300)  # killed here: the UPDATE above must roll back


@app.reconciler("sem.welcome", every="1d")
def orders_without_welcome(conn: psycopg.Connection[Any]) -> list[str | tuple[str, Any]]:
    found = conn.execute("SELECT id FROM orders ORDER BY id").fetchall()
    return [(str(row[0]), {"order": row[0]}) for row in found]


@app.task("sem.welcome")
async def welcome(ctx: taskq.TaskContext, payload: Any) -> None:
    record(ctx)
