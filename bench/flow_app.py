"""The App the flow-control benchmark's workers run: ``--app bench.flow_app:app``.

Every handler appends ``S <type> <id> <ns> <key>`` when it begins and ``E <type> <id> <ns>``
when it ends (``time.time_ns()``, the clock the benchmark process shares) to the file named by
``$TASKQ_BENCH_FLOW_FILE``: one O_APPEND write per line, atomic across processes.
"""

from __future__ import annotations

import asyncio
import os
import time

import taskq
from taskq.model import JSON

FLOW_FILE_ENV = "TASKQ_BENCH_FLOW_FILE"

app = taskq.App()
_fd: int | None = None


def _line(text: str) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ[FLOW_FILE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, text.encode())


async def _run(ctx: taskq.TaskContext, payload: JSON) -> None:
    key = (payload or {}).get("key", "-")
    _line(f"S {ctx.task_type} {ctx.task_id} {time.time_ns()} {key}\n")
    seconds = float((payload or {}).get("seconds", 0))
    if seconds:
        await asyncio.sleep(seconds)
    _line(f"E {ctx.task_type} {ctx.task_id} {time.time_ns()}\n")


# The cap scenario: at most 2 of these run at once, cluster-wide.
app.task("flow.capped", max_running=2)(_run)
# Beside it in the same queue, no limits: it should keep full speed.
app.task("flow.other")(_run)
# The crash scenario: one slot, long attempts, a worker killed while it holds the slot.
app.task("flow.crash", max_running=1, timeout=60)(_run)
# The rate scenario.
app.task("flow.rated", rate="20/s")(_run)
# The fairness scenario: round-robin across concurrency keys.
app.task("flow.tenant", fair=True)(_run)
# The retry-lane scenario (no limits: the lane is per queue).
app.task("flow.lane")(_run)
# The cost scenario: nothing to do, limits set by the benchmark as it goes.
app.task("flow.noop")(_run)
