"""How exact a throttled dead-letter replay is: ``python bench/dlq_replay.py``.

For each case it fills a fresh database with N dead letters (three error groups), runs
``taskq dlq requeue --all --rate R`` as an operator would, and reports the wall time of the
command, the span between the first and the last requeue as the database recorded it (the
audit rows' ``at``), the achieved rate and its error against the asked one. One case is
interrupted with SIGINT halfway and checks that the rest stayed dead and that the audit's
summary row counts exactly what moved. Nothing asserts a timing; the exit code is 1 only if a
command failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Databases, connect, taskq_command  # noqa: E402
from taskq.db import migrate  # noqa: E402


def fill(dsn: str, n: int) -> None:
    with connect(dsn) as conn:
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, status, retry_count, max_retry_count,"
            " last_error, finished_at, biz_id)"
            " SELECT 'bench.dead', 'DEAD_LETTER', 5, 5, (ARRAY["
            "   'HTTPError: 503 for order ' || i, 'KeyError: ''customer-' || i || '''',"
            "   'ValueError: bad amount ' || i])[1 + i %% 3],"
            " now() - interval '1 hour', 'order-' || i FROM generate_series(1, %s) AS i",
            [n],
        )


def span(dsn: str) -> tuple[int, float]:
    with connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(at) - min(at))"
            " FROM taskq.audit WHERE action = 'dlq_requeue'"
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0.0)


def case(dbs: Databases, n: int, rate: float, interrupt_at: int | None) -> dict[str, Any]:
    dsn = dbs.create(f"r{int(rate)}_{n}" + ("_int" if interrupt_at else ""))
    migrate.upgrade(dsn)
    fill(dsn, n)
    started = time.monotonic()
    proc = subprocess.Popen(
        [*taskq_command(), "dlq", "requeue", "--all", "--rate", f"{rate:g}/s", "--dsn", dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    if interrupt_at is not None:
        while span(dsn)[0] < interrupt_at and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    wall = time.monotonic() - started
    moved, first_to_last = span(dsn)
    with connect(dsn) as conn:
        dead = conn.execute(
            "SELECT count(*) FROM taskq.tasks WHERE status = 'DEAD_LETTER'"
        ).fetchone()
        summary = conn.execute(
            "SELECT detail FROM taskq.audit WHERE action = 'dlq_requeue_run'"
        ).fetchone()
    # k rows at rate r: the last one is due (k - batch) / r after the first.
    achieved = (moved - 1) / first_to_last if first_to_last else None
    return {
        "tasks": n,
        "rate_asked": rate,
        "exit_code": proc.returncode,
        "wall_seconds": round(wall, 3),
        "ideal_seconds": round(n / rate, 3) if interrupt_at is None else None,
        "requeued": moved,
        "still_dead": dead[0] if dead else None,
        "first_to_last_seconds": round(first_to_last, 3),
        "rate_achieved": round(achieved, 2) if achieved else None,
        "rate_error_pct": round(100 * (achieved - rate) / rate, 2) if achieved else None,
        "summary": summary[0] if summary else None,
        "stderr_tail": err.strip().splitlines()[-1:] if err.strip() else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TASKQ_BENCH_DSN", "postgresql://root@127.0.0.1:5432/test"),
    )
    args = parser.parse_args(argv)
    dbs = Databases(args.dsn)
    results = []
    try:
        for n, rate, interrupt in ((500, 50.0, None), (2000, 200.0, None), (500, 50.0, 250)):
            results.append(case(dbs, n, rate, interrupt))
    finally:
        dbs.drop_all()
    print(
        f"{'tasks':>6} {'asked/s':>8} {'wall s':>7} {'ideal s':>7} {'moved':>6} "
        f"{'dead':>5} {'got/s':>7} {'err %':>6} {'exit':>4}"
    )
    for r in results:
        print(
            f"{r['tasks']:>6} {r['rate_asked']:>8g} {r['wall_seconds']:>7.2f} "
            f"{r['ideal_seconds'] or 0:>7.2f} {r['requeued']:>6} {r['still_dead']:>5} "
            f"{r['rate_achieved'] or 0:>7.2f} {r['rate_error_pct'] or 0:>6.2f} {r['exit_code']:>4}"
        )
    print(json.dumps(results, indent=2, default=str))
    failed = [r for r in results if r["exit_code"] not in (0, 130)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
