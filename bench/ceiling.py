"""The ceiling: taskq's own per-task SQL in a tight psycopg loop, with no worker around it.

Each client process runs, until the queue is empty: the ``claim_batch`` statement from
``sql/queries/claim.sql`` (same parameters a worker sends, ``limit`` = the batch size), then
``mark_success_many`` from ``sql/queries/finish.sql`` for exactly the rows it claimed. Both in
autocommit, like the worker's pool connections; psycopg prepares them after five runs, as it
does in the worker. There is no handler, no asyncio, no logging: the drain rate of a worker
divided by this rate (same batch size, same number of processes) is the share of the database's
capacity the worker turns into finished tasks.

Run as a client: ``python -m bench.ceiling --dsn DSN --batch N`` prints ``ready``, waits for a
line on stdin, drains, and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from typing import Any

from psycopg.rows import dict_row

from bench import apps
from bench.harness import (
    Measurement,
    Processes,
    connect,
    cpu_seconds,
    load_noop_backlog,
    reset_tasks,
    settle,
)
from taskq.db.sqlfiles import query

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def statement_params(name: str, known: dict[str, Any]) -> dict[str, Any]:
    """The parameters the named statement takes, from ``known``. The SQL evolves with the
    worker; a placeholder the ceiling does not know fails loudly instead of measuring a
    different statement."""
    wanted = set(_PLACEHOLDER.findall(query(name)))
    missing = wanted - known.keys()
    if missing:
        raise RuntimeError(
            f"{name} now takes {sorted(missing)}: teach bench/ceiling.py what a worker sends"
        )
    return {k: known[k] for k in wanted}


def claim_params(batch: int, worker_id: str) -> dict[str, Any]:
    """What a worker running ``bench.apps:app`` on queue ``default`` sends with claim_batch."""
    handlers = [apps.app.options_for(t) for t in sorted(apps.app.tasks)]
    return statement_params(
        "claim_batch",
        {
            "queue": "default",
            "task_types": [h.task_type for h in handlers],
            "max_retry_counts": [h.max_retry_count for h in handlers],
            "timeouts": [h.timeout_seconds for h in handlers],
            "limit": batch,
            "worker_id": worker_id,
            "retries_only": False,  # normal operation: no protection level, no breaker probe
            "probe": False,
            "isolated": False,  # a normal batch: rows marked isolate wait for the isolator
        },
    )


def client(dsn: str, batch: int, worker_id: str) -> dict[str, Any]:
    claim = query("claim_batch")
    complete = query("mark_success_many")
    params = claim_params(batch, worker_id)
    statement_params("mark_success_many", {"ids": [], "tokens": [], "outcome": "success"})
    tasks = claims = 0
    with connect(dsn) as conn:
        conn.execute("SELECT 1")
        print("ready", flush=True)
        sys.stdin.readline()
        backend = conn.info.backend_pid
        cpu0, db_cpu0 = time.process_time(), cpu_seconds(backend)
        start_ns = time.time_ns()
        # dict rows, like the worker's store; the statements are prepared after five runs.
        with conn.cursor(row_factory=dict_row) as cur:
            while True:
                rows = cur.execute(claim, params).fetchall()
                claims += 1
                if not rows:
                    break
                rows.sort(key=lambda r: r["id"])  # finish.sql takes the ids in order
                done = {
                    "ids": [r["id"] for r in rows],
                    "tokens": [r["effective_id"] for r in rows],
                    "outcome": "success",
                }
                cur.execute(complete, done).fetchall()
                tasks += len(rows)
        end_ns = time.time_ns()
        cpu, db_cpu = time.process_time() - cpu0, cpu_seconds(backend) - db_cpu0
    return {
        "tasks": tasks,
        "claims": claims,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "client_cpu_s": cpu,
        "db_cpu_s": db_cpu,
    }


def run_ceiling(
    dsn: str, processes: Processes, *, tasks: int, clients: int, batch: int
) -> dict[str, Any]:
    with connect(dsn) as conn:
        reset_tasks(conn)
        load_noop_backlog(conn, tasks)
        settle(conn)
    started = [
        processes.spawn(
            [
                sys.executable,
                "-m",
                "bench.ceiling",
                "--dsn",
                dsn,
                "--batch",
                str(batch),
                "--worker-id",
                f"ceiling-{i}",
            ],
            name=f"ceiling-{clients}x{batch}-{i}",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for i in range(clients)
    ]
    for proc in started:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            processes.check_alive()
            raise RuntimeError("a ceiling client did not start")
    for proc in started:  # go, all at once
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    results = []
    for proc in started:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            processes.check_alive()
            raise RuntimeError("a ceiling client died")
        results.append(json.loads(line))
    done = sum(r["tasks"] for r in results)
    seconds = (max(r["end_ns"] for r in results) - min(r["start_ns"] for r in results)) / 1e9
    return {
        "tasks": done,
        "clients": clients,
        "batch": batch,
        "seconds": round(seconds, 3),
        "tasks_per_s": round(done / seconds, 1),
        "statements_per_s": round(sum(r["claims"] for r in results) * 2 / seconds, 1),
        "client_cpu_us_per_task": round(sum(r["client_cpu_s"] for r in results) / done * 1e6, 1),
        "db_cpu_us_per_task": round(sum(r["db_cpu_s"] for r in results) / done * 1e6, 1),
    }


def ceiling_measurements(
    dsn: str, processes: Processes, *, tasks: int, batches: list[int], say: Any
) -> list[Measurement]:
    out: list[Measurement] = []
    for batch in batches:
        for clients in (1, 2):
            # Batch 1 is one fsync'd commit per statement: a quarter of the backlog is plenty.
            n = tasks if batch >= 10 else tasks // 4
            say(f"ceiling: {clients} client(s), batch {batch}, {n:,} tasks")
            r = run_ceiling(dsn, processes, tasks=n, clients=clients, batch=batch)
            out.append(
                Measurement(
                    "ceiling",
                    f"claim+complete loop, {clients} client x batch {batch}",
                    r["tasks_per_s"],
                    "tasks/s",
                    r,
                    f"{r['statements_per_s']:,.0f} statements/s; CPU/task: client "
                    f"{r['client_cpu_us_per_task']:.0f}us, db {r['db_cpu_us_per_task']:.0f}us",
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--worker-id", default="ceiling")
    args = parser.parse_args()
    print(json.dumps(client(args.dsn, args.batch, args.worker_id)), flush=True)


if __name__ == "__main__":
    main()
