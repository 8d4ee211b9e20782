"""A/B of two worker settings, alternated in one run: ``python bench/ab.py A B``.

Each side is an environment assignment for the worker processes (``TASKQ_EVENT_LOOP=asyncio``,
``X=1``...); or ``rev:REV``: workers of the committed revision REV (``git archive``, put first
on their ``PYTHONPATH``; ``rev:HEAD~1 X=1`` compares the last commit with the working tree); or
``sql:STATEMENT``: a statement run on the benchmark's database before each of that side's
drains (``"sql:ALTER TABLE taskq.tasks SET (fillfactor = 100)"``), for schema experiments.
It runs before every drain of that side, so it must be idempotent: a migration file that edits
a function in place and refuses to apply twice (0028, 0030, 0032) needs an idempotent copy.
The drains alternate A, B, then B, A, and so on, so that the machine's drift hits both and
neither always runs first. Prints each drain and the medians.

``--latency`` alternates idle dispatch-latency runs instead of drains (the ``latency``
scenario: 1,500 tasks over 30 s; with ``--random-arrivals`` at the Poisson instants of
``bench/arrivals.py`` instead of one every 20 ms); ``--before STATEMENT`` runs a statement
before every run of both sides, e.g. a breaker state the runs should start from::

    python bench/ab.py rev:HEAD~1 X=1 --latency --before "TRUNCATE taskq.breakers" \
        --before "INSERT INTO taskq.breakers (task_type, state) VALUES ('bench.fail', 'HALF_OPEN')"
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from bench import scenarios
from bench.harness import (
    DEFAULT_DSN,
    Databases,
    connect,
    extract_snapshot,
    worker_supports_processes,
)
from bench.scenarios import Context
from taskq.db.migrate import upgrade

_LATENCY = ("p50_ms", "p99_ms", "max_ms")


def _side(text: str, scratch: Path) -> tuple[dict[str, str], str | None]:
    """A side's environment for the workers, and its statement to run before each drain."""
    if text.startswith("sql:"):
        return {}, text[4:]
    if text.startswith("rev:"):
        folder = Path(tempfile.mkdtemp(dir=scratch))
        try:
            extract_snapshot(text[4:], folder)
        except SystemExit as exc:
            raise SystemExit(f"ab.py: {exc}") from None
        return {"PYTHONPATH": str(folder)}, None
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"ab.py: expected NAME=VALUE, got {text!r}")
    return {name: value}, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--tasks", type=int, default=30_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--slots", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--latency", action="store_true", help="latency runs instead of drains")
    parser.add_argument("--before", action="append", default=[], metavar="STATEMENT")
    parser.add_argument(
        "--random-arrivals",
        action="store_true",
        help="latency runs enqueue at Poisson instants of the same mean rate",
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="taskq-ab-revs-"))
    try:
        sides = {side: _side(side, scratch) for side in (args.a, args.b)}
    except SystemExit:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    dbs = Databases(args.dsn)
    results: dict[str, list[tuple[float, float, float]]] = {args.a: [], args.b: []}
    latency: dict[str, list[dict[str, float]]] = {args.a: [], args.b: []}
    try:
        dsn = dbs.create("ab")
        upgrade(dsn)
        ctx = Context(
            dsn=dsn,
            quick=False,
            log_dir=Path(tempfile.mkdtemp(prefix="taskq-ab-")),
            console=Console(stderr=True),
            processes_flag=worker_supports_processes(),
            random_arrivals=args.random_arrivals,
        )
        for r in range(args.rounds):
            # The order swaps every round: the first drain of a pair ran 3-4 % faster in some
            # runs, whichever build it was.
            for side in (args.a, args.b) if r % 2 == 0 else (args.b, args.a):
                env, statement = sides[side]
                with connect(dsn) as conn:
                    for before in [*args.before, *([statement] if statement else [])]:
                        conn.execute(before)
                saved = dict(os.environ)
                os.environ.update(env)
                try:
                    if args.latency:
                        d = scenarios.latency_once(ctx).details
                        latency[side].append(d)
                        print(
                            f"{side:32} p50 {d['p50_ms']:.2f}  p99 {d['p99_ms']:.2f}  "
                            f"max {d['max_ms']:.2f} ms"
                        )
                        continue
                    t = scenarios.drain(
                        ctx, tasks=args.tasks, processes=args.processes, slots=args.slots
                    )
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
                rate = t.rate_steady
                worker = t.worker_cpu_us_per_task or 0.0
                db = t.db_cpu_us_per_task or 0.0
                results[side].append((rate, worker, db))
                xacts = t.db_per_task.get("db_xacts_per_task", 0.0)
                wal = t.db_per_task.get("db_wal_bytes_per_task", 0.0)
                d = t.details()
                print(
                    f"{side:32} {rate:9,.0f}/s  worker {worker:5.1f} us  db {db:5.1f} us"
                    f"  transactions/task {xacts:.3f}  WAL/task {wal:,.0f} B"
                    f"  rows per claim {d['avg_claim_batch']}, per completion "
                    f"{d['avg_completion_batch']}"
                )
    finally:
        dbs.drop_all()
        shutil.rmtree(scratch, ignore_errors=True)
    for side, found in latency.items():
        if found:
            p50, p99, top = (statistics.median(d[k] for d in found) for k in _LATENCY)
            print(f"median {side:25} p50 {p50:.2f}  p99 {p99:.2f}  max {top:.2f} ms")
    for side, runs in results.items():
        if not runs:
            continue
        med = [statistics.median(r[i] for r in runs) for i in range(3)]
        print(f"median {side:25} {med[0]:9,.0f}/s  worker {med[1]:5.1f} us  db {med[2]:5.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
