"""A NOTIFY flood at an idle worker: what does it cost?

Anyone who can connect can ``NOTIFY taskq_tasks``. The worker treats a notification as a hint
and paces wake-ups (``WorkerSettings.claim_coalesce_seconds``): after a claim round that
found the queue drained, notifications start at most one round per that period (after a burst
of a few) however many arrive. This runs one in-process worker (one queue, nothing to do)
while N sender *processes* NOTIFY as fast as they can, each notification its own transaction,
and prints for each coalesce setting: notifications heard, claim rounds, and the worker
process's CPU seconds.

    python bench/notify_flood.py [--dsn SERVER_DSN] [--seconds 5] [--senders 4]

It creates and drops its own database on the server.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import taskq
from taskq.db import migrate


def send(dsn: str, seconds: float, out: Any) -> None:
    sent = 0
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute("NOTIFY taskq_tasks, '[\"default\"]'")
            sent += 1
    out.put(sent)


async def flood(dsn: str, coalesce: float, seconds: float, senders: int) -> dict[str, float]:
    app = taskq.App(dsn=dsn)

    @app.task("bench.noop")
    async def noop(ctx: taskq.TaskContext, payload: Any) -> None: ...

    settings = taskq.WorkerSettings(poll_interval_seconds=30, claim_coalesce_seconds=coalesce)
    worker = taskq.Worker(app, dsn=dsn, settings=settings)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 30)
    await asyncio.sleep(0.5)
    claimer = worker.claimers["default"]
    notifier = worker.notifier
    assert notifier is not None
    rounds, heard = claimer.rounds, notifier.notifications
    cpu = time.process_time()
    start = time.monotonic()
    results: Any = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=send, args=(dsn, seconds, results)) for _ in range(senders)
    ]
    for p in procs:
        p.start()
    sent = 0
    for _ in procs:
        sent += await asyncio.to_thread(results.get)
    for p in procs:
        p.join()
    give_up = time.monotonic() + 60
    while notifier.notifications - heard < sent and time.monotonic() < give_up:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    elapsed = time.monotonic() - start
    out = {
        "coalesce_ms": coalesce * 1000,
        "sent": sent,
        "heard": notifier.notifications - heard,
        "seconds": elapsed,
        "claim_rounds": claimer.rounds - rounds,
        "claim_statements": claimer.claims,
        "worker_cpu_s": time.process_time() - cpu,
    }
    worker.request_stop()
    await run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TASKQ_BENCH_DSN", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--senders", type=int, default=4)
    args = parser.parse_args()
    name = f"taskq_bench_flood_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(args.dsn, dbname=name)
    try:
        migrate.upgrade(dsn)
        print(f"{args.senders} senders x {args.seconds:g}s, one NOTIFY per transaction")
        print("coalesce   sent     heard    seconds  rounds  rounds/s  worker CPU s")
        for coalesce in (0.0, 0.005):
            r = asyncio.run(flood(dsn, coalesce, args.seconds, args.senders))
            print(
                f"{r['coalesce_ms']:>5.1f} ms  {r['sent']:>7.0f}  {r['heard']:>7.0f}  "
                f"{r['seconds']:>7.2f}  {r['claim_rounds']:>6.0f}  "
                f"{r['claim_rounds'] / r['seconds']:>8.0f}  {r['worker_cpu_s']:>11.2f}"
            )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    main()
