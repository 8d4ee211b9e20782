"""The worker's Python path per attempt, without a database: ``python bench/hotpath.py``.

What a drain worker does for each task between the claim's rows and the completion's
statement: build the ``ClaimedTask`` (its payload decoded by the claim's own jsonb loader),
start it in the claimer, run the no-op async handler in the executor, report the outcome, and
batch it in the completer, whose store call is replaced by one that answers at once. Claims
of 100 rows, as a 100-slot worker's, the next one once the previous has ended.

Timed on a shared machine, this path drifts by ±20 % from run to run; so the default is
**instructions per attempt** under valgrind's callgrind, which repeat to 0.2 %: the program
runs twice under it (``--batches`` and three times as many) and the difference is divided by the
attempts between them, so start-up and imports drop out. Use it to A/B a change to the hot path
(``git stash``, run, ``git stash pop``, run). ``--timed`` prints CPU microseconds per attempt
instead (no valgrind needed; take the lowest of the runs).

The database's share (the claim and completion statements, psycopg sending them and loading the
rows) is not here: ``bench/ab.py`` and ``bench/run.py`` measure the whole worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.apps import app
from bench.scenarios import payload_200
from taskq import logs
from taskq.db import store
from taskq.db.store.claim import _PayloadLoader
from taskq.model import Claimed, ClaimedTask
from taskq.worker import gctuning
from taskq.worker.claimer import Claimer
from taskq.worker.completer import Completer
from taskq.worker.executor import Executor
from taskq.worker.inflight import ClaimsInFlight
from taskq.worker.metrics import Metrics

SLOTS = 100
PAYLOAD = b"\x01" + json.dumps(payload_200(1)).encode()  # a jsonb column, binary format
TOKEN = uuid.uuid4().bytes[:10]


class _Runtime:
    def __init__(self) -> None:
        self.app = app


class _NoControl:
    state = None


class Rows:
    """Claimed rows, as the claim returns them: the columns of ``ClaimedTask`` and held_for."""

    def __init__(self) -> None:
        self._next_id = 0
        self._now = dt.datetime.now(dt.UTC)
        self._loader = _PayloadLoader(0)

    def claim(self) -> Claimed:
        rows = []
        now, load = self._now, self._loader.load
        for _ in range(SLOTS):
            self._next_id += 1
            i = self._next_id
            token = uuid.UUID(bytes=TOKEN + i.to_bytes(6, "big"))
            # id, type, queue, biz_id, payload, priority, retry_count, max_retry_count,
            # timeout, token, trace_id, created, scheduled, started, context, parent_id,
            # ordering_key, ready_at, capped, traceparent; held_for
            head = (i, "bench.noop", "default", None, load(PAYLOAD), 0, 0, 3, 60, token, None)
            rows.append((*head, now, now, now, None, None, None, now, False, None, None))
        # As store.claim_batch builds and orders them.
        tasks = Claimed(ClaimedTask(*row[:-1]) for row in rows if row[0] is not None)
        tasks.sort(key=lambda t: (-t.priority, t.scheduled_at, t.id))
        return tasks


async def _answered_at_once(conn: Any, ids: Any, tokens: Any, **_: Any) -> set[int]:
    return set(ids)


async def drain(batches: int) -> float:
    """Run ``batches`` claims of ``SLOTS`` attempts; CPU seconds per attempt."""
    real = store.mark_success_many
    store.mark_success_many = _answered_at_once  # type: ignore[assignment]
    try:
        return await _drain(batches)
    finally:
        store.mark_success_many = real  # type: ignore[assignment]


async def _drain(batches: int) -> float:
    metrics = Metrics()
    in_flight = ClaimsInFlight()
    completer = Completer(
        None,  # type: ignore[arg-type]
        lambda task_type: app.tasks[task_type].options,
        worker_id="hotpath",
        metrics=metrics,
        claims_in_flight=in_flight,
    )

    @contextlib.asynccontextmanager
    async def no_connection() -> AsyncIterator[None]:
        yield None

    completer._conn.use = no_connection  # type: ignore[method-assign,assignment]
    executor = Executor(_Runtime(), worker_id="hotpath", threads=ThreadPoolExecutor(1))  # type: ignore[arg-type]
    claimer = Claimer(
        queue="default",
        slots=SLOTS,
        handlers=[app.tasks["bench.noop"].options],
        pool=None,  # type: ignore[arg-type]
        executor=executor,
        report=completer.put,
        worker_id="hotpath",
        poll_interval_seconds=1.0,
        control=_NoControl(),  # type: ignore[arg-type]
        metrics=metrics,
        claims_in_flight=in_flight,
    )
    rows = Rows()
    writing = asyncio.create_task(completer.run())
    started = time.process_time()
    for _ in range(batches):
        claimer._start(rows.claim())
        await claimer.idle.wait()
    await completer.drain()
    seconds = time.process_time() - started
    written = metrics.finished.labels("default", "bench.noop", "success")._value.get()
    if written != batches * SLOTS:
        raise RuntimeError(f"{written:.0f} outcomes written, expected {batches * SLOTS}")
    writing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await writing
    return seconds / (batches * SLOTS)


def _run_once(batches: int) -> float:
    logs.configure("json", "warning")
    gctuning.before_app_import()  # as ``taskq worker`` runs
    gctuning.after_app_import()
    return asyncio.run(drain(batches))


def _instructions(batches: int) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("hotpath.py: valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                valgrind,
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/out",
                sys.executable,
                __file__,
                "--child",
                str(batches),
            ],
            capture_output=True,
            text=True,
            # No .pyc written: the first of the two runs would compile what the second loads,
            # and the difference would no longer be the attempts' alone.
            env={"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"hotpath.py: callgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100, help="claims of 100 (default 100)")
    parser.add_argument("--timed", action="store_true", help="CPU µs per attempt, 7 runs")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _run_once(args.child)
        return 0
    if args.timed:
        runs = [_run_once(args.batches * 10) * 1e6 for _ in range(7)]
        print(f"CPU per attempt: {min(runs):.2f} µs (lowest of 7: {sorted(runs)})")
        return 0
    small, large = _instructions(args.batches), _instructions(3 * args.batches)
    attempts = 2 * args.batches * SLOTS
    print(f"instructions per attempt: {(large - small) / attempts:,.0f} ({attempts:,} attempts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
