"""Where a drain worker's CPU goes: one taskq worker (1 process, 32 slots, or the first
``--drain-slots`` value) drains a backlog while ``py-spy record`` samples it
(``--nonblocking``: the worker is never paused). py-spy is not a dependency: pass
``--py-spy PATH`` (install it in a venv outside the repository).

The collapsed stacks are kept in ``bench/results/profile-drain.txt`` (feed them to
``flamegraph.pl`` or https://www.speedscope.app); the run prints the functions with the most
samples on-CPU, both *self* (the leaf frame) and *inclusive* (anywhere on the stack).
"""

from __future__ import annotations

import collections
import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.harness import (
    REPO,
    DrainTiming,
    Measurement,
    Processes,
    connect,
    drain_timing,
    load_noop_backlog,
    reset_tasks,
    settle,
    wait_listening,
)
from bench.scenarios import Context, spawn_workers, wait_drained

_LINE = re.compile(r":\d+\)$")
_FILE = re.compile(r"\(([^()]*)\)$")
# Where the event loop sleeps: py-spy counts a thread parked in epoll as on-CPU for a moment.
_WAITING = ("EpollSelector.select (selectors.py)", "select (selectors.py)")
_GROUPS = {
    "selectors": "asyncio",
    "_asynciomodule.c": "asyncio",
    "psycopg_binary": "psycopg",
    "psycopg_pool": "psycopg",
    "<string>": "dataclasses (generated __init__)",
}


def frame_name(frame: str) -> str:
    """``claim_batch (taskq/store.py:83)`` -> ``claim_batch (taskq/store.py)``."""
    return _LINE.sub(")", frame.strip())


def package_of(frame: str) -> str:
    found = _FILE.search(frame)
    path = found.group(1) if found else frame
    top = path.split("/")[0].removesuffix(".py")
    return _GROUPS.get(top, top)


def summarise(collapsed: Path, top: int = 12) -> dict[str, Any]:
    """Self samples (the leaf frame) by function and by package, and inclusive samples of
    taskq's own functions; stacks parked in the event loop's epoll are counted apart."""
    self_counts: collections.Counter[str] = collections.Counter()
    package_counts: collections.Counter[str] = collections.Counter()
    taskq_incl: collections.Counter[str] = collections.Counter()
    total = waiting = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if f]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        if frames[-1] in _WAITING:
            waiting += count
            continue
        self_counts[frames[-1]] += count
        package_counts[package_of(frames[-1])] += count
        for f in set(frames):
            if package_of(f) == "taskq" and not f.startswith(("<module>", "main ", "worker ")):
                taskq_incl[f] += count

    def pct(counter: collections.Counter[str], n: int = top) -> list[list[Any]]:
        return [[name, round(100 * c / total, 1)] for name, c in counter.most_common(n)]

    return {
        "samples": total,
        "waiting_in_epoll_pct": round(100 * waiting / total, 1) if total else None,
        "self_by_package_pct": pct(package_counts, 8),
        "top_self_pct": pct(self_counts),
        "taskq_inclusive_pct": pct(taskq_incl),
    }


def drain_sampled(
    ctx: Context,
    *,
    tasks: int,
    slots: int,
    name: str,
    sampler: Callable[[int], list[str]],
    cwd: Path = REPO,
    on_drained: Callable[[psycopg.Connection[Any]], None] | None = None,
) -> DrainTiming:
    """One worker (1 process, ``slots`` slots) drains ``tasks`` no-op tasks while the command
    ``sampler(worker_pid)`` records it, started once the worker listens (the drain, not the
    imports) and stopped with Ctrl-C (py-spy and perf write their output then).
    ``on_drained(conn)`` runs before the worker stops (its connections are still open)."""
    with connect(ctx.dsn) as conn:
        reset_tasks(conn)
        load_noop_backlog(conn, tasks)
        settle(conn)
        with Processes(ctx.log_dir) as procs:
            spawned_ns = time.time_ns()
            (pid,) = spawn_workers(ctx, procs, processes=1, slots=slots, name=name)
            wait_listening(ctx.dsn, 1)
            argv = sampler(pid)
            recorder = procs.spawn(argv, name=Path(argv[0]).name, cwd=cwd)  # py-spy.log, perf.log
            polled_ns = wait_drained(conn, procs, tasks=tasks)
            if on_drained is not None:
                on_drained(conn)
            recorder.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                recorder.wait(timeout=60)
        return drain_timing(conn, spawned_ns, polled_ns)


def profile_drain(ctx: Context, py_spy: str, results_dir: Path) -> list[Measurement]:
    tasks = 20_000 if ctx.quick else 100_000
    slots = ctx.slots[0] if ctx.slots else 32  # --drain-slots: its first value
    out_file = results_dir / "profile-drain.txt"
    timing = drain_sampled(
        ctx,
        tasks=tasks,
        slots=slots,
        name="profile",
        sampler=lambda pid: [
            py_spy,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            str(out_file),
        ],
        cwd=results_dir,
    )
    if not out_file.exists():
        raise RuntimeError(f"py-spy wrote no profile; see {ctx.log_dir}/py-spy.log")
    summary = summarise(out_file)
    return [
        Measurement(
            "profile",
            f"drain under py-spy, {tasks:,} tasks, 1 proc x {slots} slots",
            round(timing.rate_steady, 1),
            "tasks/s",
            {**timing.details(), **summary, "collapsed_stacks": str(out_file)},
            f"{summary['samples']:,} samples; stacks in {out_file.name}",
        )
    ]
