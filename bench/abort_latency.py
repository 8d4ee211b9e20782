"""How fast an abort reaches a running handler: ``python bench/abort_latency.py``.

An in-process worker runs N async handlers (asleep) and N sync handlers (a loop calling
``ctx.raise_if_cancelled()`` every 10 ms); each is cancelled with ``app.cancel`` in its own
transaction, and the time from the commit to the row being CANCELLED (the handler stopped and
the completer wrote it) is measured, with and without LISTEN (without it, the heartbeat's
look-up is the only way the request arrives). Prints percentiles; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import taskq  # noqa: E402
from bench.harness import Databases, percentile  # noqa: E402
from taskq.db import migrate  # noqa: E402


def make_app(dsn: str, started: dict[int, threading.Event]) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("bench.async_sleep", timeout=120)
    async def sleeper(ctx: taskq.TaskContext, payload: Any) -> None:
        started[ctx.task_id].set()
        await asyncio.sleep(120)

    @app.task("bench.sync_loop", timeout=120)
    def looper(ctx: taskq.TaskContext, payload: Any) -> None:
        started[ctx.task_id].set()
        while True:
            ctx.raise_if_cancelled()
            time.sleep(0.01)

    return app


async def measure(dsn: str, task_type: str, n: int, listen: bool) -> list[float]:
    started: dict[int, threading.Event] = {}
    app = make_app(dsn, started)
    worker = taskq.Worker(
        app,
        dsn=dsn,
        settings=taskq.WorkerSettings(
            queues={"default": 4}, listen=listen, heartbeat_interval_seconds=1.0
        ),
    )
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.ready.wait(), 30)
    latencies = []
    try:
        for _ in range(n):
            with psycopg.connect(dsn, autocommit=True) as conn:
                task_id = app.enqueue(conn, task_type, {})
            started[task_id] = threading.Event()
            assert await asyncio.to_thread(started[task_id].wait, 30)
            with psycopg.connect(dsn) as conn:
                with conn.transaction():
                    app.cancel(conn, task_id)
                asked = time.monotonic()
                while True:
                    row = conn.execute(
                        "SELECT status FROM taskq.tasks WHERE id = %s", [task_id]
                    ).fetchone()
                    conn.commit()
                    if row and row[0] == "CANCELLED":
                        break
                    await asyncio.sleep(0.002)
            latencies.append(time.monotonic() - asked)
    finally:
        worker.request_stop(force=True)
        await asyncio.wait_for(run, 30)
    return latencies


async def main_async(args: argparse.Namespace) -> None:
    dbs = Databases(args.dsn)
    try:
        print(f"{'handler':<20} {'listen':>6} {'n':>3} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        for task_type in ("bench.async_sleep", "bench.sync_loop"):
            for listen in (True, False):
                dsn = dbs.create(f"abort_{task_type.split('.')[1]}_{int(listen)}")
                migrate.upgrade(dsn)
                n = args.n if listen else max(3, args.n // 4)
                got = await measure(dsn, task_type, n, listen)
                ms = [x * 1000 for x in got]
                print(
                    f"{task_type:<20} {listen!s:>6} {n:>3} {percentile(ms, 50):>8.1f} "
                    f"{percentile(ms, 95):>8.1f} {max(ms):>8.1f}"
                )
    finally:
        dbs.drop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TASKQ_BENCH_DSN", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--n", type=int, default=20)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
