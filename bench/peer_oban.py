"""The second peer: oban-py (https://github.com/oban-bg/oban-py, PyPI ``oban``), latency only.

Two halves in one file, as in ``peer_pgqueuer.py``:

* the **peer side** runs in oban's own virtualenv (``/tmp/taskq-bench-oban-venv``, never inside
  the repository; oban needs Python >= 3.12, taskq's venv may be older) and imports only the
  standard library, ``oban`` and its ``psycopg``: ``LatencyWorker`` is the handler (its first
  line records when it ran), the worker process is oban's own ``oban start`` CLI, and
  ``python peer_oban.py enqueue-latency`` is the producer;
* the **harness side** (``run_oban``) runs in taskq's virtualenv: it finds a Python >= 3.12,
  builds that venv with pip, installs oban's schema with ``oban install`` into a database of its
  own, and runs taskq's latency scenario against it, timed the same way.

oban's settings are its defaults, which are already the low-latency ones: its PostgreSQL
notifier LISTENs on a dedicated connection, the insert statement itself calls ``pg_notify``, and
the notification wakes the queue's producer, which fetches at once (the 5 ms debounce only
applies while jobs of that queue are running); the stager's 1 s poll is only the fallback.
The queue is ``default`` with a limit of 10 (``--queues default:10``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the harness side only; the peer side never imports taskq's bench
    from bench.harness import Measurement

OBAN_VENV = Path("/tmp/taskq-bench-oban-venv")
OBAN_REQUIREMENT = "oban==0.7.0"  # the version whose API this file was written against
LATENCY_FILE_ENV = "TASKQ_BENCH_LATENCY_FILE"
LATENCY_WORKER = "peer_oban.LatencyWorker"  # how a job names its worker: a dotted class path
QUEUE_LIMIT = 10
PYTHON_NAMES = ("python3.13", "python3.12")

# --- peer side (oban's venv) -------------------------------------------------------------------

_latency_fd: int | None = None


def _record_start(job_id: int, started_ns: int) -> None:
    global _latency_fd
    if _latency_fd is None:
        path = os.environ[LATENCY_FILE_ENV]
        _latency_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_latency_fd, f"{job_id} {started_ns}\n".encode())


class LatencyWorker:
    """The latency handler. oban resolves a job's worker by its dotted path (importing the module
    in the worker process); ``@oban.worker`` would only add ``new``/``enqueue`` helpers, and this
    module must stay importable without oban on the harness side."""

    async def process(self, job: Any) -> None:
        started_ns = time.time_ns()  # first: the moment the handler began
        _record_start(int(job.id), started_ns)


async def _enqueue_latency(
    dsn: str, count: int, interval: float, random_arrivals: bool = False
) -> list[str]:
    """Enqueue ``count`` jobs, one every ``interval`` seconds (or at ``arrivals.offsets``'
    random instants), through ``Oban.enqueue`` on an autocommit psycopg connection;
    ``"<job id> <ns>"`` lines, the time taken as soon as the enqueue returned (its INSERT is
    its own transaction: the commit was acknowledged)."""
    import psycopg
    from oban import Job, Oban  # type: ignore[import-not-found]  # oban: its own venv

    pool = await Oban.create_pool(dsn, min_size=1, max_size=1)
    oban = Oban(pool=pool)  # client mode (no queues): enqueues only
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    lines: list[str] = []
    try:
        # One warm-up job, waited for: the worker is up, idle and warm when the timed ones start.
        # Its row turns 'completed' when the producer acks it, the last thing the worker does.
        await oban.enqueue(Job(LATENCY_WORKER, args={"warmup": True}), conn=conn)
        deadline = time.monotonic() + 60
        while True:
            cur = await conn.execute("SELECT count(*) FROM oban_jobs WHERE state <> 'completed'")
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the oban worker did not run the warm-up job within 60s")
            await asyncio.sleep(0.05)
        from arrivals import offsets  # bench/, this script's directory

        start = time.monotonic() + interval
        for i, offset in enumerate(offsets(count, interval, random_arrivals=random_arrivals)):
            pause = start + offset - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            job = await oban.enqueue(Job(LATENCY_WORKER, args={"seq": i}), conn=conn)
            lines.append(f"{int(job.id)} {time.time_ns()}")  # autocommit: commit acknowledged
    finally:
        await conn.close()
        await pool.close()
    return lines


def peer_main() -> None:
    parser = argparse.ArgumentParser(description="oban-py side of the taskq benchmark")
    sub = parser.add_subparsers(dest="command", required=True)
    enq = sub.add_parser("enqueue-latency")
    enq.add_argument("--dsn", required=True)
    enq.add_argument("--count", type=int, required=True)
    enq.add_argument("--interval", type=float, required=True)
    enq.add_argument("--out", type=Path, required=True)
    enq.add_argument("--random-arrivals", action="store_true")
    args = parser.parse_args()
    lines = asyncio.run(_enqueue_latency(args.dsn, args.count, args.interval, args.random_arrivals))
    args.out.write_text("\n".join(lines) + "\n")


# --- harness side (taskq's venv) ---------------------------------------------------------------


def pyenv_versions() -> Path:
    return Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"


def python_candidates(path_env: str | None, versions_dir: Path) -> list[Path]:
    """Interpreters that may be a Python >= 3.12, best first: ``python3.13`` and ``python3.12``
    on ``path_env``, then ``<versions_dir>/3.1[2-9]*/bin/python`` (pyenv's builds, newest first).
    Only candidates: a pyenv shim on PATH exists but fails unless that version is selected."""
    found: list[Path] = []
    for name in PYTHON_NAMES:
        hit = shutil.which(name, path=path_env) if path_env else None
        if hit:
            found.append(Path(hit))

    def version(path: Path) -> list[int]:
        return [int(part) for part in re.findall(r"\d+", path.name)]

    if versions_dir.is_dir():
        for folder in sorted(versions_dir.glob("3.1[2-9]*"), key=version, reverse=True):
            exe = folder / "bin" / "python"
            if exe.is_file() and os.access(exe, os.X_OK):
                found.append(exe)
    return found


def runs_python_312(python: Path) -> bool:
    """Whether ``python`` starts and is at least 3.12 (a pyenv shim for an unselected version
    exits with an error)."""
    check = "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)"
    try:
        done = subprocess.run([str(python), "-c", check], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_python(
    candidates: Iterable[Path], works: Callable[[Path], bool] = runs_python_312
) -> Path | None:
    """The first candidate that ``works``, else None."""
    return next((path for path in candidates if works(path)), None)


def oban_python() -> Path:
    return OBAN_VENV / "bin" / "python"


def ensure_oban(say: Callable[[str], None]) -> str:
    """Create the venv and install oban there if needed; return its version. Raises ``Skipped``
    with the reason when that is not possible (no Python >= 3.12, pip failing)."""
    from bench.harness import Skipped, build_venv

    python = oban_python()
    probe = [str(python), "-c", "import oban; print(oban.__version__)"]
    if python.exists():
        done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            return done.stdout.strip()
    base = find_python(python_candidates(os.environ.get("PATH"), pyenv_versions()))
    if base is None:
        raise Skipped(
            f"oban-py needs Python >= 3.12: none found ({', '.join(PYTHON_NAMES)} on PATH, "
            f"{pyenv_versions()}/3.1[2-9]*/bin/python)"
        )
    say(f"oban: installing {OBAN_REQUIREMENT} into {OBAN_VENV} with {base}")
    steps = [
        [str(base), "-m", "venv", "--clear", str(OBAN_VENV)],
        [str(python), "-m", "pip", "install", "--quiet", OBAN_REQUIREMENT],
    ]
    return build_venv(steps, probe, "oban-py")


def _oban_cli(*args: str) -> list[str]:
    return [str(OBAN_VENV / "bin" / "oban"), *args]


def _install_schema(dsn: str) -> None:
    done = subprocess.run(
        _oban_cli("install", "--dsn", dsn), capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"oban install failed: {(done.stderr or done.stdout)[-500:]}")


def _worker_argv(dsn: str) -> list[str]:
    """``oban start``, the CLI its docs recommend for production (uvloop, orjson, pruner and
    lifeline on). ``--cron-modules`` names this module so the CLI imports it instead of grepping
    the working directory for cron workers; ``--log-level WARNING`` keeps per-job logs out."""
    return _oban_cli(
        "start",
        "--dsn",
        dsn,
        "--queues",
        f"default:{QUEUE_LIMIT}",
        "--log-level",
        "WARNING",
        "--cron-modules",
        "peer_oban",
    )


def _reset(conn: Any) -> None:
    conn.execute("TRUNCATE oban_jobs, oban_producers, oban_leaders RESTART IDENTITY")
    conn.execute("VACUUM ANALYZE oban_jobs")
    conn.execute("CHECKPOINT")


def _remaining(conn: Any) -> int:
    row = conn.execute("SELECT count(*) FROM oban_jobs WHERE state <> 'completed'").fetchone()
    return int(row[0])


def _latency(
    dsn: str,
    log_dir: Path,
    starts: Path,
    *,
    seconds: float,
    interval: float,
    random_arrivals: bool,
) -> dict[int, int]:
    from bench.harness import Processes, connect, run_latency_producer

    commits = log_dir / "oban-latency-commits.txt"
    here = str(Path(__file__).resolve().parent)
    with connect(dsn) as conn:
        _reset(conn)
        with Processes(log_dir) as procs:
            procs.spawn(
                _worker_argv(dsn),
                name="oban-latency",
                env={"PYTHONPATH": here, LATENCY_FILE_ENV: str(starts)},
                cwd=log_dir,  # no stray oban.toml is read
            )
            return run_latency_producer(
                procs,
                [str(oban_python()), __file__, "enqueue-latency", "--dsn", dsn],
                seconds=seconds,
                interval=interval,
                commits=commits,
                name="oban-latency-producer",
                who="oban",
                remaining=lambda: _remaining(conn),
                random_arrivals=random_arrivals,
            )


def run_oban(
    admin_dsn_factory: Callable[[str], str],
    log_dir: Path,
    *,
    quick: bool,
    say: Callable[[str], None],
    repeat: int = 1,
    ours: Callable[[], Measurement] | None = None,
    random_arrivals: bool = False,
) -> list[Measurement]:
    """Install oban-py, then taskq's latency scenario against it, ``repeat`` times; the run with
    the lowest p99 is reported. ``admin_dsn_factory(suffix)`` creates a database of the run and
    returns its DSN.

    ``ours``: one run of taskq's own latency scenario. Each of oban-py's runs is then paired
    with one of taskq's, right before or after it (taking turns who goes first, as ``versus``
    does for the drains), and the pairs come back as one more measurement (``oban-pairs``):
    a tail measured minutes apart on a shared machine says more about the machine's hour than
    about either queue."""
    from bench import arrivals
    from bench.harness import LATENCY_INTERVAL, Measurement, latency_seconds
    from bench.scenarios import best_latency, latency_measurement

    version = ensure_oban(say)
    label = f"oban-py {version}"
    dsn = admin_dsn_factory("oban")
    _install_schema(dsn)
    seconds = latency_seconds(quick)
    found = []
    pairs: list[dict[str, Any]] = []
    for i in range(max(1, repeat)):
        taskq_first = i % 2 == 0
        mine = ours() if ours is not None and taskq_first else None
        say(f"oban: {label} latency" + (f", pair {i + 1}" if ours is not None else ""))
        starts = log_dir / "oban-latency-starts.txt"
        starts.unlink(missing_ok=True)
        committed = _latency(
            dsn,
            log_dir,
            starts,
            seconds=seconds,
            interval=LATENCY_INTERVAL,
            random_arrivals=random_arrivals,
        )
        case = f"{label}: commit -> handler start{arrivals.label(random_arrivals)}"
        theirs = latency_measurement("oban", case, committed, starts)
        found.append(theirs)
        if ours is not None and not taskq_first:
            mine = ours()
        if mine is not None and mine.value is not None and theirs.value is not None:
            keys = ("p50_ms", "p99_ms", "max_ms")
            pairs.append(
                {
                    "taskq_first": taskq_first,
                    "taskq": {k: mine.details[k] for k in keys},
                    "oban-py": {k: theirs.details[k] for k in keys},
                }
            )
    out = []
    if pairs:
        out.append(
            Measurement(
                "oban-pairs",
                f"taskq and {label} latency runs alternated",
                float(len(pairs)),
                "pairs",
                {"pairs": pairs},
                "",
            )
        )
    m = best_latency(found)
    m.details["peer"] = label
    m.details["settings"] = {
        "worker": f"oban start --queues default:{QUEUE_LIMIT} (defaults otherwise)",
        "notifier": "postgres LISTEN/NOTIFY (pg_notify in the insert statement)",
        "producer": "Oban.enqueue(Job(...), conn=<autocommit psycopg AsyncConnection>)",
    }
    return [m, *out]


if __name__ == "__main__":
    peer_main()
