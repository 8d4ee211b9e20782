"""The peer: PgQueuer (https://github.com/janbjorge/pgqueuer), measured in the same run.

Two halves in one file:

* the **peer side** runs in PgQueuer's own virtualenv (``/tmp/taskq-bench-pgqueuer-venv``,
  never inside the repository) and imports only the standard library, ``pgqueuer`` and
  ``asyncpg``: ``create_pgqueuer`` is the worker factory (a no-op entrypoint and a latency one
  that records when its first line ran), ``python peer_pgqueuer.py worker`` runs it as
  ``pgq run`` would, and ``python peer_pgqueuer.py enqueue-latency`` is the latency producer;
* the **harness side** (``run_peer``) runs in taskq's virtualenv: it builds that venv with pip,
  installs PgQueuer's schema with ``pgq install`` into a database of its own, and runs the same
  drain and latency scenarios as for taskq, timed the same way (from PgQueuer's own log table).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the harness side only; the peer side never imports taskq's bench
    from bench.harness import Measurement

PEER_VENV = Path("/tmp/taskq-bench-pgqueuer-venv")
DSN_ENV = "TASKQ_BENCH_PEER_DSN"
LATENCY_FILE_ENV = "TASKQ_BENCH_LATENCY_FILE"

# --- peer side (PgQueuer's venv) ---------------------------------------------------------------

_latency_fd: int | None = None


def _record_start(job_id: int, started_ns: int) -> None:
    global _latency_fd
    if _latency_fd is None:
        path = os.environ[LATENCY_FILE_ENV]
        _latency_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_latency_fd, f"{job_id} {started_ns}\n".encode())


@contextlib.asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[Any]:
    """The worker factory (what ``pgq run`` takes): a no-op entrypoint and a latency one."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver

    connection = await asyncpg.connect(os.environ[DSN_ENV])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("bench.noop")  # type: ignore[untyped-decorator]  # pgqueuer: own venv
    async def noop(job: Any) -> None:
        pass

    @pgq.entrypoint("bench.latency")  # type: ignore[untyped-decorator]
    async def latency(job: Any) -> None:
        started_ns = time.time_ns()  # first: the moment the handler began
        _record_start(int(job.id), started_ns)

    try:
        yield pgq
    finally:
        await connection.close()


async def _enqueue_latency(
    dsn: str, count: int, interval: float, random_arrivals: bool = False
) -> list[str]:
    """Enqueue ``count`` jobs, one every ``interval`` seconds (or at ``arrivals.offsets``'
    random instants); ``"<job id> <ns>"`` lines, the time taken as soon as the
    (autocommitted) enqueue returned."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))
    lines: list[str] = []
    # One warm-up job, waited for: the worker is up, idle and warm when the timed ones start.
    await queries.enqueue("bench.latency", b"warmup")
    deadline = time.monotonic() + 60
    while await connection.fetchval("SELECT count(*) FROM pgqueuer") > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the PgQueuer worker did not run the warm-up job within 60s")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    from arrivals import offsets  # bench/, this script's directory

    start = time.monotonic()
    for i, offset in enumerate(offsets(count, interval, random_arrivals=random_arrivals)):
        pause = start + offset - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        (job_id,) = await queries.enqueue("bench.latency", str(i).encode())
        lines.append(f"{int(job_id)} {time.time_ns()}")  # autocommit: commit acknowledged
    await connection.close()
    return lines


def _payload_200(i: int) -> bytes:
    """The same ~200-byte JSON payload taskq's enqueue scenarios send."""
    return (
        f'{{"order_id": {i}, "customer": "cust-000123456", "email": "someone@example.com", '
        '"items": [{"sku": "SKU-1234", "qty": 2}, {"sku": "SKU-5678", "qty": 1}], '
        '"note": "please deliver to the back door, ring twice"}'
    ).encode()


async def _enqueue_rate(dsn: str, count: int, chunk: int) -> float:
    """Seconds to enqueue ``count`` jobs through ``Queries.enqueue`` on an autocommit asyncpg
    connection (each call is its own transaction): one job per call when ``chunk`` is 1, else
    lists of ``chunk`` jobs per call (PgQueuer's batch insert)."""
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    connection = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(connection))
    started = time.perf_counter()
    if chunk == 1:
        for i in range(count):
            await queries.enqueue("bench.noop", _payload_200(i))
    else:
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            await queries.enqueue(
                ["bench.noop"] * n, [_payload_200(start + i) for i in range(n)], [0] * n
            )
    seconds = time.perf_counter() - started
    await connection.close()
    return seconds


def _run_worker(batch_size: int) -> None:
    """What ``pgq run peer_pgqueuer:create_pgqueuer --batch-size N`` does (uvloop when it is
    installed, as the CLI does), through PgQueuer's public ``pgqueuer.run``. The CLI itself
    cannot be used: with typer 0.29 (what pip resolves today) ``pgq run`` dies at start in
    ``setup_fancy_logger`` (AttributeError: 'str' object has no attribute 'name')."""
    import logging

    from pgqueuer import run

    logging.basicConfig(level=logging.WARNING)
    main = run(create_pgqueuer, batch_size=batch_size)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def peer_main() -> None:
    parser = argparse.ArgumentParser(description="PgQueuer side of the taskq benchmark")
    sub = parser.add_subparsers(dest="command", required=True)
    work = sub.add_parser("worker")
    work.add_argument("--batch-size", type=int, default=10)
    enq = sub.add_parser("enqueue-latency")
    enq.add_argument("--dsn", required=True)
    enq.add_argument("--count", type=int, required=True)
    enq.add_argument("--interval", type=float, required=True)
    enq.add_argument("--out", type=Path, required=True)
    enq.add_argument("--random-arrivals", action="store_true")
    rate = sub.add_parser("enqueue-rate")
    rate.add_argument("--dsn", required=True)
    rate.add_argument("--count", type=int, required=True)
    rate.add_argument("--chunk", type=int, required=True)
    args = parser.parse_args()
    if args.command == "worker":
        _run_worker(args.batch_size)
        return
    if args.command == "enqueue-rate":
        print(asyncio.run(_enqueue_rate(args.dsn, args.count, args.chunk)))
        return
    lines = asyncio.run(_enqueue_latency(args.dsn, args.count, args.interval, args.random_arrivals))
    args.out.write_text("\n".join(lines) + "\n")


# --- harness side (taskq's venv) ---------------------------------------------------------------


def peer_python() -> Path:
    return PEER_VENV / "bin" / "python"


def ensure_peer(say: Any) -> str:
    """Create the venv and install PgQueuer there if needed; return its version. Raises
    ``Skipped`` with the reason when that is not possible."""
    from bench.harness import build_venv

    python = peer_python()
    probe = [str(python), "-c", "import pgqueuer, asyncpg; print(pgqueuer.__version__)"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return done.stdout.strip()
    say(f"peer: installing pgqueuer and asyncpg into {PEER_VENV}")
    steps = [
        [sys.executable, "-m", "venv", str(PEER_VENV)],
        [str(python), "-m", "pip", "install", "--quiet", "pgqueuer", "asyncpg"],
    ]
    return build_venv(steps, probe, "PgQueuer")


def _pgq(*args: str, dsn: str) -> None:
    done = subprocess.run(
        [str(PEER_VENV / "bin" / "pgq"), "--pg-dsn", dsn, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgq {' '.join(args)} failed: {(done.stderr or done.stdout)[-500:]}")


def _worker_argv(batch_size: int) -> list[str]:
    return [str(peer_python()), __file__, "worker", "--batch-size", str(batch_size)]


def _peer_env(dsn: str, **extra: str) -> dict[str, str]:
    return {DSN_ENV: dsn, "PYTHONPATH": str(Path(__file__).resolve().parent), **extra}


def _reset(conn: Any) -> None:
    conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY")


def _settle(conn: Any) -> None:
    conn.execute("VACUUM ANALYZE pgqueuer")
    conn.execute("VACUUM ANALYZE pgqueuer_log")
    conn.execute("CHECKPOINT")


def _remaining(conn: Any) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
    return int(row[0])


def _startup_cpu(dsn: str, log_dir: Path) -> dict[str, float]:
    """CPU one PgQueuer worker and its backend use to start and idle for 2 s (subtracted from
    the drains, as for taskq's)."""
    from bench.harness import CpuMeter, Processes, connect

    with connect(dsn) as conn:
        _reset(conn)
    with Processes(log_dir) as procs:
        meter = CpuMeter(dsn, lambda: [p.pid for p in procs.procs])
        meter.start()
        procs.spawn(_worker_argv(10), name="pgq-startup", env=_peer_env(dsn))
        time.sleep(2.0)
        procs.check_alive()
        meter.stop()
    return {"worker": meter.client_seconds, "db": meter.server_seconds}


def _drain(
    dsn: str,
    log_dir: Path,
    *,
    tasks: int,
    processes: int,
    batch_size: int,
    startup: dict[str, float],
) -> dict[str, Any]:
    from bench.harness import CpuMeter, Processes, connect, progress_watch, wait_until

    with connect(dsn) as conn:
        _reset(conn)
        conn.execute(
            "INSERT INTO pgqueuer (priority, entrypoint, payload, status)"
            " SELECT 0, 'bench.noop', convert_to(i::text, 'UTF8'), 'queued'"
            " FROM generate_series(1, %s) AS i",
            (tasks,),
        )
        _settle(conn)
        with Processes(log_dir) as procs:
            meter = CpuMeter(dsn, lambda: [p.pid for p in procs.procs])
            meter.start()
            spawned_ns = time.time_ns()
            for i in range(processes):
                procs.spawn(_worker_argv(batch_size), name=f"pgq-drain-{i}", env=_peer_env(dsn))
            watch = progress_watch(30.0)

            def drained() -> bool:
                remaining = _remaining(conn)
                watch(remaining)
                return remaining == 0

            wait_until(
                drained,
                timeout=max(120.0, tasks / 100),
                what="the PgQueuer drain",
                alive=procs.check_alive,
            )
            polled_ns = time.time_ns()
            meter.stop()
        row = conn.execute(
            """
            SELECT count(*),
                   (extract(epoch FROM min(created)) * 1e9)::bigint,
                   (extract(epoch FROM max(created)) * 1e9)::bigint,
                   count(DISTINCT created)
            FROM pgqueuer_log WHERE status = 'successful' AND entrypoint = 'bench.noop'
            """
        ).fetchone()
    assert row is not None
    done, first_ns, last_ns, flushes = int(row[0]), int(row[1]), int(row[2]), int(row[3])
    steady = (last_ns - first_ns) / 1e9
    return {
        "tasks": done,
        "processes": processes,
        "batch_size": batch_size,
        "seconds_from_spawn": round((last_ns - spawned_ns) / 1e9, 3),
        "seconds_first_to_last_success": round(steady, 3),
        "startup_to_first_success_s": round((first_ns - spawned_ns) / 1e9, 3),
        "tasks_per_s_from_spawn": round(done / ((last_ns - spawned_ns) / 1e9), 1),
        "tasks_per_s_steady": round((done - 1) / steady, 1) if steady > 0 else None,
        "seconds_polled": round((polled_ns - spawned_ns) / 1e9, 3),
        "completion_statements": flushes,
        "avg_completion_batch": round(done / flushes, 1) if flushes else None,
        "worker_cpu_us_per_task": round(
            max(0.0, meter.client_seconds - processes * startup["worker"]) / done * 1e6, 1
        ),
        "db_cpu_us_per_task": round(
            max(0.0, meter.server_seconds - processes * startup["db"]) / done * 1e6, 1
        ),
    }


def _latency(
    dsn: str, log_dir: Path, *, seconds: float, interval: float, random_arrivals: bool
) -> dict[int, int]:
    from bench.harness import Processes, connect, run_latency_producer

    starts = log_dir / "pgq-latency-starts.txt"
    commits = log_dir / "pgq-latency-commits.txt"
    with connect(dsn) as conn:
        _reset(conn)
        _settle(conn)
        with Processes(log_dir) as procs:
            procs.spawn(
                _worker_argv(10),
                name="pgq-latency",
                env=_peer_env(dsn, **{LATENCY_FILE_ENV: str(starts)}),
            )
            return run_latency_producer(
                procs,
                [str(peer_python()), __file__, "enqueue-latency", "--dsn", dsn],
                seconds=seconds,
                interval=interval,
                commits=commits,
                name="pgq-latency-producer",
                who="PgQueuer",
                remaining=lambda: _remaining(conn),
                random_arrivals=random_arrivals,
            )


def _enqueue(dsn: str, *, count: int, chunk: int, rounds: int) -> list[float]:
    """Rates (jobs/s) of ``rounds`` enqueue runs of ``count`` jobs, ``chunk`` per call."""
    from bench.harness import connect

    rates: list[float] = []
    for _ in range(rounds):
        with connect(dsn) as conn:
            _reset(conn)
            _settle(conn)
        done = subprocess.run(
            [
                str(peer_python()),
                __file__,
                "enqueue-rate",
                "--dsn",
                dsn,
                "--count",
                str(count),
                "--chunk",
                str(chunk),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the PgQueuer enqueue failed: {done.stderr.strip()[-500:]}")
        rates.append(round(count / float(done.stdout.strip().splitlines()[-1]), 1))
    return rates


def _spread(runs: list[float]) -> str:
    if len(runs) < 2:
        return ""
    return f"; best of {len(runs)} ({min(runs):,.0f}-{max(runs):,.0f})"


def run_peer(
    admin_dsn_factory: Any,
    log_dir: Path,
    *,
    quick: bool,
    say: Any,
    repeat: int = 1,
    sizes: list[int] | None = None,
    random_arrivals: bool = False,
) -> list[Measurement]:
    """Install PgQueuer, then its enqueues, drains and latency. ``admin_dsn_factory(suffix)``
    creates a database of the run and returns its DSN. Each enqueue and drain runs ``repeat``
    times; the best run is reported, every run's rate in ``runs``."""
    from bench import arrivals
    from bench.harness import LATENCY_INTERVAL, Measurement, latency_seconds
    from bench.scenarios import best_latency, latency_measurement

    version = ensure_peer(say)
    label = f"PgQueuer {version}"
    dsn = admin_dsn_factory("pgq")
    _pgq("install", dsn=dsn)
    repeat = max(1, repeat)
    out: list[Measurement] = []
    for chunk, count, what in (
        (1, 500 if quick else 5_000, "Queries.enqueue, 1 job per call (autocommit)"),
        (1000, 5_000 if quick else 50_000, "Queries.enqueue, lists of 1,000 per call"),
    ):
        say(f"peer: {label} enqueue, {count:,} jobs, {chunk} per call")
        runs = _enqueue(dsn, count=count, chunk=chunk, rounds=repeat)
        out.append(
            Measurement(
                "peer",
                f"{label}: enqueue, {what}",
                max(runs),
                "tasks/s",
                {"peer": label, "tasks": count, "chunk": chunk, "runs": runs},
                f"{1e3 / max(runs):.3f} ms per job{_spread(runs)}"
                if chunk == 1
                else f"{chunk / max(runs) * 1e3:.1f} ms per call{_spread(runs)}",
            )
        )
    startup = _startup_cpu(dsn, log_dir)
    # 10 is PgQueuer's default; 100 is the setting its own benchmark and the project's issue
    # table used (and is compared with taskq's 100 slots).
    sizes = sizes or ([5_000] if quick else [20_000, 100_000])
    for tasks in sizes:
        for batch_size in (10, 100) if tasks == sizes[0] else (100,):
            for processes in (1, 2):
                say(f"peer: {label} drain, {tasks:,} jobs, {processes} proc, batch {batch_size}")
                found = [
                    _drain(
                        dsn,
                        log_dir,
                        tasks=tasks,
                        processes=processes,
                        batch_size=batch_size,
                        startup=startup,
                    )
                    for _ in range(repeat)
                ]
                runs = sorted(d["tasks_per_s_steady"] or 0.0 for d in found)
                d = max(found, key=lambda d: d["tasks_per_s_steady"] or 0.0)
                default = " (default)" if batch_size == 10 else ""
                out.append(
                    Measurement(
                        "peer",
                        f"{label}: drain {tasks:,}, {processes} proc, batch {batch_size}{default}",
                        d["tasks_per_s_steady"],
                        "tasks/s",
                        {"peer": label, **d, "runs": runs},
                        f"{d['tasks_per_s_from_spawn']:,.0f}/s from spawn; log flush batch "
                        f"{d['avg_completion_batch']}; CPU/task: worker "
                        f"{d['worker_cpu_us_per_task']:.0f}us, db "
                        f"{d['db_cpu_us_per_task']:.0f}us{_spread(runs)}",
                    )
                )
    seconds = latency_seconds(quick)
    found = []
    for _ in range(repeat):
        say(f"peer: {label} latency")
        starts = log_dir / "pgq-latency-starts.txt"
        starts.unlink(missing_ok=True)
        committed = _latency(
            dsn,
            log_dir,
            seconds=seconds,
            interval=LATENCY_INTERVAL,
            random_arrivals=random_arrivals,
        )
        found.append(
            latency_measurement(
                "peer",
                f"{label}: commit -> handler start{arrivals.label(random_arrivals)}",
                committed,
                starts,
            )
        )
    m = best_latency(found)
    m.details["peer"] = label
    out.append(m)
    return out


if __name__ == "__main__":
    peer_main()
