"""The App the benchmark's worker processes run: ``taskq worker --app bench.apps:app``.

Handlers do no work, so a drain measures taskq itself: claim, dispatch, report, complete.
``bench.latency`` records when its first line ran (``time.time_ns()``, CLOCK_REALTIME, which
the benchmark process on the same machine shares) in the file named by
``$TASKQ_BENCH_LATENCY_FILE``, one ``"<task id> <ns>"`` line per task.
"""

from __future__ import annotations

import os
import time

import taskq
from taskq.model import JSON

LATENCY_FILE_ENV = "TASKQ_BENCH_LATENCY_FILE"

app = taskq.App()

_latency_fd: int | None = None


def record_start(task_id: int, started_ns: int) -> None:
    """Append one line with an O_APPEND write: atomic for a line this short, even when
    several worker processes share the file."""
    global _latency_fd
    if _latency_fd is None:
        path = os.environ[LATENCY_FILE_ENV]
        _latency_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_latency_fd, f"{task_id} {started_ns}\n".encode())


@app.task("bench.noop")
async def noop(ctx: taskq.TaskContext, payload: JSON) -> None:
    pass


@app.task("bench.noop_sync")
def noop_sync(ctx: taskq.TaskContext, payload: JSON) -> None:
    pass


@app.task("bench.fail", max_retry_count=0)
async def fail(ctx: taskq.TaskContext, payload: JSON) -> None:
    """Every run fails (the failure-storm scenario): one attempt, then DEAD_LETTER, written by
    the same batched failure statement a retry would be."""
    raise RuntimeError("downstream unavailable")


@app.task("bench.retry", max_retry_count=2, retry_delay=0, retry_jitter=0)
async def fail_and_retry(ctx: taskq.TaskContext, payload: JSON) -> None:
    """Every run fails and is retried at once, twice (the failure-storm scenario's retry
    drain): three attempts per task, two written FAILED and claimed again from the retry
    lane, the last DEAD_LETTER."""
    raise RuntimeError("downstream unavailable")


@app.task("bench.latency")
async def latency(ctx: taskq.TaskContext, payload: JSON) -> None:
    started_ns = time.time_ns()  # first: the moment the handler began
    record_start(ctx.task_id, started_ns)
