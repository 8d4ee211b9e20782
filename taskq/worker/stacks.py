"""``kill -USR1 <worker pid>``: log where every asyncio task and every thread of the worker is
waiting, without stopping it. For the worker that seems stuck at 3 a.m. (a shutdown that does
not end, a queue that does not drain): the stacks say what it waits on."""

from __future__ import annotations

import asyncio
import io
import sys
import threading
import traceback

import structlog

log = structlog.get_logger("taskq.worker")


def dump() -> None:
    """Log one ``stacks`` event: each asyncio task of the running loop with the stack it is
    suspended in, and each thread's current stack."""
    tasks: dict[str, str] = {}
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(file=out)
        tasks[f"{task.get_name()} ({task.get_coro()!r:.80})"] = out.getvalue()
    names = {t.ident: t.name for t in threading.enumerate()}
    threads = {
        f"{names.get(ident, '?')} ({ident})": "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    }
    log.warning("stacks", tasks=tasks, threads=threads)
