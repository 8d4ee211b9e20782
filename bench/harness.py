"""The benchmark's plumbing: its own databases, worker processes, clocks and results.

Everything here is synchronous psycopg 3. Worker processes are started in their own process
group and killed (group and all) when the ``Processes`` context ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/test"
POLL_SECONDS = 0.1


# --- results -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Measurement:
    """One number the run reports, with the details behind it (which go to the JSON)."""

    scenario: str
    case: str
    value: float | None
    unit: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Skipped(Exception):
    """A scenario (or part of one) that cannot run here; the reason is reported, not raised."""


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# --- DSNs and databases ---------------------------------------------------------------------


def dsn_for(dsn: str, dbname: str) -> str:
    """``dsn`` pointing at another database, as a URL (libpq, psycopg and asyncpg all read it)."""
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    host = str(params.pop("host", "") or "")
    port = params.pop("port", None)
    name = quote(str(params.pop("dbname")), safe="")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    if host.startswith("/"):  # a socket directory goes in the query string
        params["host"] = host
        host = ""
    netloc = f"{auth}{host}" + (f":{port}" if port else "")
    query = urlencode({k: str(v) for k, v in params.items() if v is not None})
    return f"postgresql://{netloc}/{name}" + (f"?{query}" if query else "")


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(
        dsn, autocommit=autocommit, application_name="taskq-bench", connect_timeout=10
    )


class Databases:
    """Creates uniquely named ``taskq_bench_<hex>_<suffix>`` databases and drops them all."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.run_id = secrets.token_hex(3)
        self.created: list[str] = []

    def create(self, suffix: str) -> str:
        name = f"taskq_bench_{self.run_id}_{suffix}"
        with connect(self.admin_dsn) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        return dsn_for(self.admin_dsn, name)

    def drop_all(self) -> None:
        with connect(self.admin_dsn) as conn:
            for name in reversed(self.created):
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self.created.clear()


_SPEED_LOOP = compile("total = 0\nfor i in range(2_000_000):\n    total += i\n", "<speed>", "exec")


def machine_speed() -> float:
    """Seconds this interpreter takes for 10,000,000 additions in a loop at module level (best
    of three runs of 2,000,000, scaled; module level, as the figures quoted in the README were
    taken with ``python3 -c``): how fast the machine runs Python right now. The absolute rows
    move with it (bench/README.md), so the run's title shows it beside the load average."""

    def once() -> float:
        t0 = time.perf_counter()
        exec(_SPEED_LOOP, {})  # fresh globals: the loop's names are module-level names
        return time.perf_counter() - t0

    return round(5 * min(once() for _ in range(3)), 2)


def server_info(dsn: str) -> dict[str, Any]:
    settings = (
        "server_version",
        "synchronous_commit",
        "fsync",
        "shared_buffers",
        "autovacuum",
        "max_connections",
        "wal_level",
    )
    info: dict[str, Any] = {}
    with connect(dsn) as conn:
        for name in settings:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            info[name] = row[0] if row else None
    return info


# --- processes ------------------------------------------------------------------------------


def taskq_command() -> list[str]:
    """The installed ``taskq`` console script beside this interpreter, else the module."""
    script = Path(sys.executable).parent / "taskq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "taskq"]


def worker_supports_processes() -> bool:
    """Whether ``taskq worker`` has grown a ``--processes`` option."""
    out = subprocess.run(
        [*taskq_command(), "worker", "--help"], capture_output=True, text=True, timeout=60
    )
    return "--processes" in out.stdout


class Processes:
    """Child processes started in their own session (process group). Leaving the ``with``
    block SIGTERMs each group, waits a little, then SIGKILLs what is left: even on error."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.done: list[subprocess.Popen[bytes]] = []  # exited as they should (check_alive)
        self._logs: list[IO[bytes]] = []
        self._spawned = len(list(log_dir.glob("*.log")))  # unique log names within a run

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        name: str,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = None,
    ) -> subprocess.Popen[bytes]:
        self._spawned += 1
        path = self.log_dir / f"{self._spawned:03d}-{name}.log"
        log = open(path, "ab")  # noqa: SIM115 - closed in stop_all
        self._logs.append(log)
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=stdin,
            stdout=stdout if stdout is not None else log,
            stderr=log,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self, *, grace_seconds: float = 10.0) -> None:
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            _signal_group(proc, signal.SIGKILL)  # stragglers, and any grandchildren
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs.clear()
        self.done.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def check_alive(self) -> None:
        """Raise if a process that should still be running has exited (a finished producer,
        ``done``, is not one of them)."""
        for proc in self.procs:
            if proc.poll() is not None and proc not in self.done:
                argv = proc.args if isinstance(proc.args, list) else [proc.args]
                raise RuntimeError(
                    f"process {proc.pid} ({' '.join(map(str, argv))[:120]}) exited with "
                    f"code {proc.returncode}; see the logs in {self.log_dir}{self.log_tail()}"
                )

    def log_tail(self, chars: int = 600) -> str:
        """The end of the most recently written log, to put in an error message."""
        for log in sorted(self._logs, key=lambda f: Path(f.name).stat().st_mtime, reverse=True):
            log.flush()
            text = Path(log.name).read_text(errors="replace").strip()
            if text:
                return f"\n--- {Path(log.name).name}, last lines ---\n{text[-chars:]}"
        return ""


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # start_new_session=True: the child leads its own group, whose id is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def extract_snapshot(rev: str, into: Path) -> str:
    """``git archive REV`` extracted into ``into``; the short commit id. A worker started with
    ``PYTHONPATH=into`` imports that revision's taskq, and with it its SQL. SystemExit (one
    line) when REV names no commit."""
    found = subprocess.run(
        ["git", "rev-parse", "--short", f"{rev}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise SystemExit(f"no commit {rev!r}: {found.stderr.strip()}")
    commit = found.stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True)
    archive.check_returncode()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit


_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from "state" on (comm may hold spaces)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0 if it is gone)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK if fields else 0.0


def group_members(pgid: int) -> list[int]:
    """Every process in process group ``pgid`` (a worker and any children it forked)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


class CpuMeter:
    """CPU used between ``start()`` and ``stop()`` by the processes we started (whole process
    groups) and by the PostgreSQL backends serving them (read from /proc: same machine)."""

    def __init__(self, dsn: str, pgids: Callable[[], Sequence[int]]) -> None:
        self._dsn = dsn
        self._pgids = pgids
        self._client0: dict[int, float] = {}
        self._server0: dict[int, float] = {}
        self.client_seconds = 0.0
        self.server_seconds = 0.0

    def _clients(self) -> dict[int, float]:
        return {p: cpu_seconds(p) for g in self._pgids() for p in group_members(g)}

    def _servers(self) -> dict[int, float]:
        with connect(self._dsn) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name <> 'taskq-bench' AND pid <> pg_backend_pid()"
            ).fetchall()
        return {int(r[0]): cpu_seconds(int(r[0])) for r in rows}

    def start(self) -> None:
        self._client0, self._server0 = self._clients(), self._servers()

    def stop(self) -> None:
        clients, servers = self._clients(), self._servers()
        self.client_seconds = sum(v - self._client0.get(p, 0.0) for p, v in clients.items())
        self.server_seconds = sum(v - self._server0.get(p, 0.0) for p, v in servers.items())


def db_counters(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """This database's cumulative statistics (transactions and row changes). Backends publish
    theirs at least once a second and when they exit, so read them after the workers stop."""
    conn.execute("SELECT pg_stat_force_next_flush()")  # this session's own writes count now
    conn.execute("SELECT pg_stat_clear_snapshot()")
    # WAL is the server's (every database's): on the benchmark's own server, the run's.
    row = conn.execute(
        "SELECT xact_commit + xact_rollback, tup_inserted, tup_updated, tup_deleted,"
        " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
        " FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    names = ("xacts", "inserted", "updated", "deleted", "wal_bytes")
    return dict(zip(names, map(int, row), strict=True))


def per_task(before: dict[str, int], after: dict[str, int], tasks: int) -> dict[str, float]:
    return {f"db_{k}_per_task": round((after[k] - before[k]) / tasks, 3) for k in before}


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM... from /proc/<pid>/status, in KiB."""
    found: dict[str, int] = {}
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key.startswith("Vm") and rest.strip().endswith("kB"):
                found[key] = int(rest.split()[0])
    return found


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    alive: Callable[[], None] | None = None,
    interval: float = POLL_SECONDS,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Stalled(RuntimeError):
    """Workers are alive but nothing has finished for a while (a broken claim, say)."""


def progress_watch(stall_seconds: float) -> Callable[[int], None]:
    """A check that raises ``Stalled`` when the remaining count has not moved for
    ``stall_seconds`` (the workers' logs say why)."""
    last: list[float] = [-1.0, time.monotonic()]

    def seen(remaining: int) -> None:
        now = time.monotonic()
        if remaining != last[0]:
            last[0], last[1] = remaining, now
        elif now - last[1] > stall_seconds:
            raise Stalled(f"no task finished for {stall_seconds:.0f}s ({remaining:,} left)")

    return seen


def wait_listening(dsn: str, count: int, *, timeout: float = 30.0) -> None:
    """Wait until ``count`` taskq workers have their LISTEN connection up on this database
    (the last thing ``Worker.run`` does before it is ready)."""
    with connect(dsn) as conn:

        def ready() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database()"
                " AND application_name LIKE 'taskq-listen-%%' AND query ILIKE 'LISTEN%%'"
            ).fetchone()
            return row is not None and row[0] >= count

        wait_until(ready, timeout=timeout, what="the workers' LISTEN connections")


# --- the taskq table ------------------------------------------------------------------------


def reset_tasks(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE taskq.tasks RESTART IDENTITY")


def reset_protection(conn: psycopg.Connection[Any]) -> None:
    """No breaker and no outcome statistics: the state a worker's protection evaluator starts
    from. A scenario that makes tasks fail calls this after itself too: its failures would
    trip the type's breaker in the next scenario's worker (its leader weighs the last 300 s),
    and a HALF_OPEN breaker with nothing to probe adds a probe's round trips to a claim every
    few seconds (idle latency p99 2.70 -> 3.27 ms in two alternated pairs of 1,500 tasks)."""
    conn.execute("TRUNCATE taskq.breakers, taskq.task_stats")


def load_noop_backlog(
    conn: psycopg.Connection[Any], n: int, *, task_type: str = "bench.noop"
) -> None:
    """``n`` runnable no-op tasks in one statement (one NOTIFY), as a bulk SQL producer would."""
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, payload)"
        " SELECT %s, jsonb_build_object('i', i) FROM generate_series(1, %s) AS i",
        (task_type, n),
    )


def settle(conn: psycopg.Connection[Any]) -> None:
    """Same starting line for every measured run: statistics fresh, hint bits and visibility
    map set, dirty buffers written (so a checkpoint does not land in the middle).

    This connection's own counts (the backlog it just inserted) are sent to the statistics
    system first: sent after the VACUUM's report they were counted again (PostgreSQL 15: 60,000
    live rows in pg_stat_user_tables for a 30,000-row backlog), and the worker's leader, seeing
    the table twice its planner's size, analyzed it at the start of every drain (0033)."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")  # flushed when the backend went idle after the statement above
    conn.execute("VACUUM ANALYZE taskq.tasks")
    conn.execute("CHECKPOINT")


def count_not_done(conn: psycopg.Connection[Any]) -> int:
    """Tasks not yet SUCCESS, counted through the two partial indexes (runnable, processing)
    only: with a seq scan (what the planner picks while most rows are PENDING) each poll would
    read the whole table, a million finished rows included, on the cores the drain uses."""
    conn.execute("SET enable_seqscan = off")
    try:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM taskq.tasks WHERE status IN ('PENDING', 'FAILED'))"
            " + (SELECT count(*) FROM taskq.tasks WHERE status = 'PROCESSING')"
        ).fetchone()
    finally:
        conn.execute("RESET enable_seqscan")
    assert row is not None
    return int(row[0])


@dataclasses.dataclass
class DrainTiming:
    tasks: int
    spawned_ns: int
    first_success_ns: int
    last_success_ns: int
    polled_done_ns: int
    claims: int
    completions: int
    worker_cpu_s: float | None = None
    """CPU of the worker processes during the drain, their start-up excluded."""
    db_cpu_s: float | None = None
    """CPU of the PostgreSQL backends serving the workers during the drain."""
    db_per_task: dict[str, float] = dataclasses.field(default_factory=dict)
    """Transactions and row changes in the database per task (pg_stat_database)."""
    runs: list[float] = dataclasses.field(default_factory=list)
    """Steady rates of every repeat, when the drain was repeated (this one is the best)."""

    @property
    def from_spawn_seconds(self) -> float:
        return (self.last_success_ns - self.spawned_ns) / 1e9

    @property
    def steady_seconds(self) -> float:
        return (self.last_success_ns - self.first_success_ns) / 1e9

    @property
    def rate_from_spawn(self) -> float:
        return self.tasks / self.from_spawn_seconds

    @property
    def rate_steady(self) -> float:
        """Tasks per second between the first and the last SUCCESS (startup excluded)."""
        return (self.tasks - 1) / self.steady_seconds if self.steady_seconds > 0 else math.nan

    @property
    def worker_cpu_us_per_task(self) -> float | None:
        return None if self.worker_cpu_s is None else self.worker_cpu_s / self.tasks * 1e6

    @property
    def db_cpu_us_per_task(self) -> float | None:
        return None if self.db_cpu_s is None else self.db_cpu_s / self.tasks * 1e6

    def details(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "seconds_from_spawn": round(self.from_spawn_seconds, 3),
            "seconds_first_to_last_success": round(self.steady_seconds, 3),
            "startup_to_first_success_s": round((self.first_success_ns - self.spawned_ns) / 1e9, 3),
            "tasks_per_s_from_spawn": round(self.rate_from_spawn, 1),
            "tasks_per_s_steady": round(self.rate_steady, 1),
            "seconds_polled": round((self.polled_done_ns - self.spawned_ns) / 1e9, 3),
            "claim_statements": self.claims,
            "avg_claim_batch": round(self.tasks / self.claims, 1) if self.claims else None,
            "repeats_tasks_per_s_steady": self.runs or None,
            "worker_cpu_s": _round(self.worker_cpu_s, 3),
            "db_backends_cpu_s": _round(self.db_cpu_s, 3),
            "worker_cpu_us_per_task": _round(self.worker_cpu_us_per_task, 1),
            "db_cpu_us_per_task": _round(self.db_cpu_us_per_task, 1),
            **self.db_per_task,
            "completion_statements": self.completions,
            "avg_completion_batch": round(self.tasks / self.completions, 1)
            if self.completions
            else None,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def drain_timing(
    conn: psycopg.Connection[Any],
    spawned_ns: int,
    polled_done_ns: int,
    *,
    task_type: str = "bench.noop",
) -> DrainTiming:
    """Read the drain's timing back from the rows themselves: ``finished_at`` is the
    completion statement's ``now()`` (same machine, same CLOCK_REALTIME as ``time.time_ns``),
    and rows claimed (completed) by one statement share one ``started_at`` (``finished_at``)."""
    row = conn.execute(
        """
        SELECT count(*),
               (extract(epoch FROM min(finished_at)) * 1e9)::bigint,
               (extract(epoch FROM max(finished_at)) * 1e9)::bigint,
               count(DISTINCT (worker_id, started_at)),
               count(DISTINCT (worker_id, finished_at))
        FROM taskq.tasks WHERE status = 'SUCCESS' AND task_type = %s
        """,
        (task_type,),
    ).fetchone()
    assert row is not None
    return DrainTiming(
        tasks=int(row[0]),
        spawned_ns=spawned_ns,
        first_success_ns=int(row[1]),
        last_success_ns=int(row[2]),
        polled_done_ns=polled_done_ns,
        claims=int(row[3]),
        completions=int(row[4]),
    )


LATENCY_INTERVAL = 0.02
LATENCY_SECONDS = 30.0


def latency_seconds(quick: bool) -> float:
    """How long a latency run enqueues, one task every ``LATENCY_INTERVAL``: 1,500 tasks, so
    its p99 is the 15th slowest and its max one of 1,500. At 10 s (500 tasks, the p99 the 5th
    slowest) the p99 of the same code moved by a third from run to run on a shared machine,
    more than the difference the oban-py rows are there to show. A longer run also meets the
    periodic work each system does at idle (leases, reapers, breakers)."""
    return 3.0 if quick else LATENCY_SECONDS


def run_latency_producer(
    procs: Processes,
    argv: list[str],
    *,
    seconds: float,
    interval: float,
    commits: Path,
    name: str,
    who: str,
    remaining: Callable[[], int],
    random_arrivals: bool = False,
) -> dict[int, int]:
    """A peer's latency producer (``argv`` + count, interval and output file), run to its end;
    then wait until the peer's worker has run every job. The producer's ``"<job id> <ns>"``
    lines (the time each enqueue's commit was acknowledged), as a dict. ``random_arrivals``:
    the producer enqueues at ``bench/arrivals.py``'s Poisson instants."""
    producer = procs.spawn(
        [
            *argv,
            "--count",
            str(int(seconds / interval)),
            "--interval",
            str(interval),
            "--out",
            str(commits),
            *(["--random-arrivals"] if random_arrivals else []),
        ],
        name=name,
    )
    producer.wait(timeout=seconds + 120)
    if producer.returncode != 0:
        raise RuntimeError(f"the {who} producer failed; see {procs.log_dir}")
    procs.done.append(producer)  # its exit is no worker's death
    wait_until(
        lambda: remaining() == 0,
        timeout=60,
        what=f"the {who} latency jobs",
        alive=procs.check_alive,
    )
    committed: dict[int, int] = {}
    for line in commits.read_text().splitlines():
        job_id, ns = line.split()
        committed[int(job_id)] = int(ns)
    return committed


def build_venv(steps: list[list[str]], probe: list[str], what: str) -> str:
    """Run the commands that build a peer's virtualenv, then ``probe``, which prints the
    peer's version; return it. A step that fails skips the scenario with its last lines."""
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Skipped(f"cannot install {what}: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise Skipped(f"cannot install {what}: {' | '.join(tail)}")
    done = subprocess.run(probe, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise Skipped(f"{what} installed but does not import: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()
