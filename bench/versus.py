"""taskq against PgQueuer, drain by drain: the two systems' drains alternated, pair by pair.

The ``peer`` scenario runs PgQueuer after every taskq scenario, ten minutes or more later, and
on this shared machine the speed moves by ±20 % in that time, so the ratio of those two phases
says as much about the neighbours as about the queues (one run gave 1.29x for the 100,000-task
two-process drain, the next, of the same code, 0.70x). Here each pair is one taskq drain and one
PgQueuer drain of the same backlog and process count, one right after the other, the order
swapped every round; the ratio reported is the median of the pairs' ratios, and every pair is
in the JSON. taskq runs one queue of 100 slots per process, PgQueuer ``batch_size=100``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.harness import Measurement
from bench.peer_pgqueuer import _drain, _pgq, _startup_cpu, ensure_peer
from bench.scenarios import Context, drain


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num and den else None


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return round(statistics.median(found), 3) if found else None


def run_versus(ctx: Context, create_db: Callable[[str], str], rounds: int) -> list[Measurement]:
    """``rounds`` alternated pairs per (backlog, processes); ``create_db(suffix)`` makes
    PgQueuer's database of the run."""
    version = ensure_peer(ctx.say)
    peer_dsn = create_db("pgqvs")
    _pgq("install", dsn=peer_dsn)
    startup = _startup_cpu(peer_dsn, ctx.log_dir)
    sizes = ctx.sizes or ([5_000] if ctx.quick else [20_000, 100_000])
    out: list[Measurement] = []
    for tasks in sizes:
        for processes in (1, 2):
            pairs: list[dict[str, Any]] = []
            for r in range(max(1, rounds)):
                ctx.say(
                    f"versus: {tasks:,} tasks, {processes} proc, pair {r + 1} "
                    f"({'taskq' if r % 2 == 0 else 'PgQueuer'} first)"
                )
                ours: Any = None
                theirs: dict[str, Any] = {}
                for side in ("taskq", "pgqueuer") if r % 2 == 0 else ("pgqueuer", "taskq"):
                    if side == "taskq":
                        ours = drain(ctx, tasks=tasks, processes=processes, slots=100)
                    else:
                        theirs = _drain(
                            peer_dsn,
                            ctx.log_dir,
                            tasks=tasks,
                            processes=processes,
                            batch_size=100,
                            startup=startup,
                        )
                pairs.append(
                    {
                        "taskq_rate": round(ours.rate_steady, 1),
                        "pgqueuer_rate": theirs["tasks_per_s_steady"],
                        "taskq_worker_cpu_us": ours.worker_cpu_us_per_task,
                        "pgqueuer_worker_cpu_us": theirs["worker_cpu_us_per_task"],
                        "taskq_db_cpu_us": ours.db_cpu_us_per_task,
                        "pgqueuer_db_cpu_us": theirs["db_cpu_us_per_task"],
                        "rate_ratio": _ratio(ours.rate_steady, theirs["tasks_per_s_steady"]),
                        "worker_cpu_theirs_over_ours": _ratio(
                            theirs["worker_cpu_us_per_task"], ours.worker_cpu_us_per_task
                        ),
                        "db_cpu_theirs_over_ours": _ratio(
                            theirs["db_cpu_us_per_task"], ours.db_cpu_us_per_task
                        ),
                    }
                )
            out.extend(_measurements(f"PgQueuer {version}", tasks, processes, pairs))
    return out


def _measurements(
    label: str, tasks: int, processes: int, pairs: list[dict[str, Any]]
) -> list[Measurement]:
    case = f"drain {tasks:,}, {processes} proc, alternated pairs"
    details = {"peer": label, "tasks": tasks, "processes": processes, "pairs": pairs}
    out = []
    for key, what, unit_note in (
        ("rate_ratio", "rate, taskq / PgQueuer", "tasks/s"),
        ("worker_cpu_theirs_over_ours", "worker CPU/task, theirs / ours", "us"),
        ("db_cpu_theirs_over_ours", "db CPU/task, theirs / ours", "us"),
    ):
        ratios = [p[key] for p in pairs]
        if key == "rate_ratio":
            each = ", ".join(f"{p['taskq_rate']:,.0f}/{p['pgqueuer_rate']:,.0f}" for p in pairs)
        elif key.startswith("worker"):
            each = ", ".join(
                f"{p['taskq_worker_cpu_us'] or 0:.0f}/{p['pgqueuer_worker_cpu_us'] or 0:.0f}"
                for p in pairs
            )
        else:
            each = ", ".join(
                f"{p['taskq_db_cpu_us'] or 0:.0f}/{p['pgqueuer_db_cpu_us'] or 0:.0f}" for p in pairs
            )
        shown = ", ".join(f"{r:.2f}" if r is not None else "-" for r in ratios)
        out.append(
            Measurement(
                "versus",
                f"{case}: {what}",
                _median(ratios),
                "x",
                details,
                f"median of {len(pairs)} pairs ({shown}); taskq/PgQueuer {unit_note}: {each}",
            )
        )
    return out
