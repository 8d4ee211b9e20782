"""taskq against PgQueuer, drain by drain: the two systems' drains alternated, pair by pair.

The ``peer`` scenario runs PgQueuer after every taskq scenario, ten minutes or more later, and
on this shared machine the speed moves by ±20 % in that time, so the ratio of those two phases
says as much about the neighbours as about the queues (one run gave 1.29x for the 100,000-task
two-process drain, the next, of the same code, 0.70x). Here each pair is one taskq drain and one
PgQueuer drain of the same backlog and process count, one right after the other, the order
swapped every round; the ratio reported is the median of the pairs' ratios, and every pair is
in the JSON. taskq runs one queue of 100 slots per process, PgQueuer ``batch_size=100``.

Single enqueues (one job per transaction, autocommit, 5,000 each) and bulk enqueues (50,000 in
calls of 1,000, a commit each) are alternated the same way first: fsync-bound, they move with
the machine as much as the drains do.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.harness import DrainTiming, Measurement
from bench.peer_pgqueuer import _drain, _enqueue, _pgq, _startup_cpu, ensure_peer
from bench.scenarios import (
    BULK_CHUNK,
    Context,
    drain,
    enqueue_autocommit_rate,
    enqueue_bulk_rate,
)

# (what, taskq's figure, PgQueuer's, whether the ratio is taskq's over PgQueuer's): rates are,
# CPU per task is PgQueuer's over taskq's, so above 1.00x taskq is better in every row.
_METRICS = (
    ("rate, taskq / PgQueuer", "taskq_rate", "pgqueuer_rate", True),
    ("worker CPU/task, theirs / ours", "taskq_worker_cpu_us", "pgqueuer_worker_cpu_us", False),
    ("db CPU/task, theirs / ours", "taskq_db_cpu_us", "pgqueuer_db_cpu_us", False),
)


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num and den else None


def run_versus(ctx: Context, create_db: Callable[[str], str], rounds: int) -> list[Measurement]:
    """``rounds`` alternated pairs per (backlog, processes); ``create_db(suffix)`` makes
    PgQueuer's database of the run."""
    version = ensure_peer(ctx.say)
    peer_dsn = create_db("pgqvs")
    _pgq("install", dsn=peer_dsn)
    startup = _startup_cpu(peer_dsn, ctx.log_dir)
    sizes = ctx.sizes or ([5_000] if ctx.quick else [20_000, 100_000])
    label = f"PgQueuer {version}"
    out = [
        _enqueue_pairs(ctx, peer_dsn, label, rounds=rounds, chunk=1),
        _enqueue_pairs(ctx, peer_dsn, label, rounds=rounds, chunk=BULK_CHUNK),
    ]
    for tasks in sizes:
        for processes in (1, 2):
            pairs = _pairs(ctx, peer_dsn, startup, tasks=tasks, processes=processes, rounds=rounds)
            out.extend(_measurements(f"PgQueuer {version}", tasks, processes, pairs))
    return out


def _enqueue_pairs(
    ctx: Context, peer_dsn: str, label: str, *, rounds: int, chunk: int
) -> Measurement:
    """One job per transaction (``chunk`` 1: taskq's ``app.enqueue``, PgQueuer's
    ``Queries.enqueue``) or ``chunk`` per call (``app.enqueue_many``, ``Queries.enqueue`` of
    lists), alternated; the median of the pairs' ratios."""
    if chunk == 1:
        count = 500 if ctx.quick else 5_000
        what = "enqueue, 1 per transaction (autocommit)"

        def ours() -> float:
            return enqueue_autocommit_rate(ctx, count)
    else:
        count = 5_000 if ctx.quick else 50_000
        what = f"enqueue, {chunk:,} per call"

        def ours() -> float:
            return enqueue_bulk_rate(ctx, count)

    def theirs() -> float:
        return _enqueue(peer_dsn, count=count, chunk=chunk, rounds=1)[0]

    pairs: list[dict[str, float]] = []
    for r in range(max(1, rounds)):
        ctx.say(f"versus: {what}, {count:,} tasks, pair {r + 1}")
        if r % 2 == 0:
            our_rate = ours()
            their_rate = theirs()
        else:
            their_rate = theirs()
            our_rate = ours()
        pairs.append({"taskq_rate": round(our_rate, 1), "pgqueuer_rate": their_rate})
    ratios = [p["taskq_rate"] / p["pgqueuer_rate"] for p in pairs]
    each = ", ".join(f"{p['taskq_rate']:,.0f}/{p['pgqueuer_rate']:,.0f}" for p in pairs)
    return Measurement(
        "versus",
        f"{what}, alternated pairs: rate, taskq / PgQueuer",
        round(statistics.median(ratios), 3),
        "x",
        {"peer": label, "tasks": count, "chunk": chunk, "pairs": pairs},
        f"median of {len(pairs)} pairs ({', '.join(f'{r:.2f}' for r in ratios)}); "
        f"taskq/PgQueuer: {each}",
    )


def _pairs(
    ctx: Context,
    peer_dsn: str,
    startup: dict[str, float],
    *,
    tasks: int,
    processes: int,
    rounds: int,
) -> list[dict[str, Any]]:
    """Each system's figures, pair by pair; taskq first in the even rounds."""

    def ours() -> DrainTiming:
        return drain(ctx, tasks=tasks, processes=processes, slots=100)

    def theirs() -> dict[str, Any]:
        return _drain(
            peer_dsn,
            ctx.log_dir,
            tasks=tasks,
            processes=processes,
            batch_size=100,
            startup=startup,
        )

    pairs: list[dict[str, Any]] = []
    for r in range(max(1, rounds)):
        taskq_first = r % 2 == 0
        ctx.say(
            f"versus: {tasks:,} tasks, {processes} proc, pair {r + 1} "
            f"({'taskq' if taskq_first else 'PgQueuer'} first)"
        )
        if taskq_first:
            t, p = ours(), theirs()
        else:
            p = theirs()
            t = ours()
        pairs.append(
            {
                "taskq_rate": round(t.rate_steady, 1),
                "pgqueuer_rate": p["tasks_per_s_steady"],
                "taskq_worker_cpu_us": t.worker_cpu_us_per_task,
                "pgqueuer_worker_cpu_us": p["worker_cpu_us_per_task"],
                "taskq_db_cpu_us": t.db_cpu_us_per_task,
                "pgqueuer_db_cpu_us": p["db_cpu_us_per_task"],
            }
        )
    return pairs


def _measurements(
    label: str, tasks: int, processes: int, pairs: list[dict[str, Any]]
) -> list[Measurement]:
    case = f"drain {tasks:,}, {processes} proc, alternated pairs"
    details = {"peer": label, "tasks": tasks, "processes": processes, "pairs": pairs}
    out = []
    for what, ours, theirs, ours_over_theirs in _METRICS:
        ratios = [
            _ratio(p[ours], p[theirs]) if ours_over_theirs else _ratio(p[theirs], p[ours])
            for p in pairs
        ]
        found = [r for r in ratios if r is not None]
        shown = ", ".join(f"{r:.2f}" if r is not None else "-" for r in ratios)
        each = ", ".join(f"{p[ours] or 0:,.0f}/{p[theirs] or 0:,.0f}" for p in pairs)
        out.append(
            Measurement(
                "versus",
                f"{case}: {what}",
                round(statistics.median(found), 3) if found else None,
                "x",
                details,
                f"median of {len(pairs)} pairs ({shown}); taskq/PgQueuer: {each}",
            )
        )
    return out
