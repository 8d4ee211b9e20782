"""The taskq scenarios. Each takes the run's ``Context`` and returns its measurements; none
asserts anything about timing."""

from __future__ import annotations

import dataclasses
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console

from bench import apps, arrivals
from bench.harness import (
    LATENCY_INTERVAL,
    POLL_SECONDS,
    CpuMeter,
    DrainTiming,
    Measurement,
    Processes,
    Stalled,
    count_not_done,
    db_counters,
    drain_timing,
    latency_seconds,
    load_noop_backlog,
    per_task,
    percentile,
    proc_status,
    progress_watch,
    reset_protection,
    reset_tasks,
    settle,
    taskq_command,
    wait_listening,
)
from bench.harness import connect as db_connect

APP_SPEC = "bench.apps:app"
STALL_SECONDS = 30.0
"""A drain in which no task finishes for this long is reported as failed, with the logs."""


@dataclasses.dataclass
class Context:
    dsn: str
    quick: bool
    log_dir: Path
    console: Console
    processes_flag: bool
    """``taskq worker`` has ``--processes``: use it instead of spawning N workers."""
    repeat: int = 1
    """Drains, bulk enqueues and latency runs this many times each; the best is reported."""
    sizes: list[int] | None = None
    """Drain backlog sizes (``--sizes``; default 20,000 and 100,000, quick 5,000)."""
    slots: list[int] | None = None
    """Slots per worker for the drains (``--drain-slots``; default 32 and 100)."""
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What one scenario learns for a later one (the worker's observed claim batch)."""
    random_arrivals: bool = False
    """Latency runs enqueue at random (Poisson) instants of the same mean rate instead of
    one every ``LATENCY_INTERVAL``: some tasks then arrive just after a claim round."""

    def say(self, message: str) -> None:
        self.console.log(message)


def payload_200(i: int) -> dict[str, Any]:
    """A ~200-byte JSON payload, like a small business event."""
    return {
        "order_id": i,
        "customer": "cust-000123456",
        "email": "someone@example.com",
        "items": [{"sku": "SKU-1234", "qty": 2}, {"sku": "SKU-5678", "qty": 1}],
        "note": "please deliver to the back door, ring twice",
    }


# --- workers ----------------------------------------------------------------------------------


def spawn_workers(
    ctx: Context,
    procs: Processes,
    *,
    processes: int,
    slots: int,
    env: dict[str, str] | None = None,
    name: str = "worker",
    separate: bool = False,
) -> list[int]:
    """Start ``processes`` taskq worker processes (``taskq worker --processes N`` when the CLI
    has it, unless ``separate``: N independent ``taskq worker`` commands); return the pids we
    started."""
    base = [
        *taskq_command(),
        "worker",
        "--app",
        APP_SPEC,
        "--queues",
        f"default={slots}",
        "--dsn",
        ctx.dsn,
        "--log-level",
        "warning",
    ]
    if processes > 1 and ctx.processes_flag and not separate:
        return [procs.spawn([*base, "--processes", str(processes)], name=name, env=env).pid]
    return [procs.spawn(base, name=f"{name}-{i}", env=env).pid for i in range(processes)]


def wait_drained(
    conn: psycopg.Connection[Any],
    procs: Processes,
    *,
    tasks: int,
    on_poll: Callable[[], None] | None = None,
) -> int:
    """Poll until no task is left unfinished; return the time.time_ns() of the poll that saw it."""

    watch = progress_watch(STALL_SECONDS)
    deadline = time.monotonic() + max(120.0, tasks / 100)
    started = time.monotonic()
    while True:
        if on_poll is not None:
            on_poll()
        remaining = count_not_done(conn)
        if remaining == 0:
            return time.time_ns()
        try:
            watch(remaining)
        except Stalled as exc:
            raise Stalled(f"{exc}{procs.log_tail()}") from None
        procs.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the drain did not finish in time ({remaining:,} left)")
        time.sleep(poll_interval(tasks, remaining, time.monotonic() - started))


def poll_interval(tasks: int, remaining: int, elapsed: float) -> float:
    """100 ms near the end; up to 1 s while the end is far off (the poll shares the cores with
    the drain, and the timing comes from the rows, not from the poll)."""
    done = tasks - remaining
    if done <= 0 or elapsed <= 0:
        return POLL_SECONDS
    eta = remaining / (done / elapsed)
    return min(1.0, max(POLL_SECONDS, eta / 4))


def drain(
    ctx: Context,
    *,
    tasks: int,
    processes: int,
    slots: int,
    history: int = 0,
    hold_xmin: bool = False,
    separate: bool = False,
) -> DrainTiming:
    """Load ``tasks`` no-op tasks (after ``history`` finished rows), start the workers and time
    them until every task is SUCCESS."""
    with db_connect(ctx.dsn) as conn:
        reset_tasks(conn)
        if history:
            insert_history(conn, history)
        load_noop_backlog(conn, tasks)
        settle(conn)
        holder: psycopg.Connection[Any] | None = None
        if hold_xmin:
            holder = db_connect(ctx.dsn, autocommit=False)
            holder.execute("SELECT txid_current()")  # BEGIN + an xid: holds back the horizon
        try:
            counters = db_counters(conn)
            with Processes(ctx.log_dir) as procs:
                meter = CpuMeter(ctx.dsn, lambda: [p.pid for p in procs.procs])
                meter.start()
                spawned_ns = time.time_ns()
                spawn_workers(
                    ctx, procs, processes=processes, slots=slots, name="drain", separate=separate
                )
                polled_ns = wait_drained(conn, procs, tasks=tasks)
                meter.stop()
        finally:
            if holder is not None:
                holder.rollback()
                holder.close()
        time.sleep(0.5)  # the workers' backends exit and publish their statistics
        counters_after = db_counters(conn)
        timing = drain_timing(conn, spawned_ns, polled_ns)
        timing.db_per_task = per_task(counters, counters_after, tasks)
    startup = startup_cpu(ctx, processes=processes, separate=separate)
    timing.worker_cpu_s = max(0.0, meter.client_seconds - startup["worker"])
    timing.db_cpu_s = max(0.0, meter.server_seconds - startup["db"])
    return timing


def startup_cpu(ctx: Context, *, processes: int, separate: bool) -> dict[str, float]:
    """CPU the workers (a supervisor included) and their backends use to start and sit ready
    on an empty queue; measured once per way of starting them, so drains can report the CPU
    per task without the start-up."""
    key = f"startup_cpu:{processes}:{separate}"
    if key not in ctx.shared:
        with db_connect(ctx.dsn) as conn:
            reset_tasks(conn)
        with Processes(ctx.log_dir) as procs:
            meter = CpuMeter(ctx.dsn, lambda: [p.pid for p in procs.procs])
            meter.start()
            spawn_workers(
                ctx, procs, processes=processes, slots=32, name="startup", separate=separate
            )
            wait_listening(ctx.dsn, processes)
            time.sleep(0.3)
            meter.stop()
        ctx.shared[key] = {"worker": meter.client_seconds, "db": meter.server_seconds}
    return dict(ctx.shared[key])


def drain_repeated(ctx: Context, **kwargs: Any) -> DrainTiming:
    """``drain`` ``ctx.repeat`` times from scratch; the best run (``best_drain``)."""
    return best_drain([drain(ctx, **kwargs) for _ in range(ctx.repeat)])


def best_drain(timings: list[DrainTiming]) -> DrainTiming:
    """The run with the best steady rate (on a shared machine the slower runs measure the
    neighbours), with every run's rate in ``runs``."""
    ordered = sorted(timings, key=lambda t: t.rate_steady)
    best = ordered[-1]
    best.runs = [round(t.rate_steady, 1) for t in ordered]
    return best


def insert_history(conn: psycopg.Connection[Any], rows: int) -> None:
    """Finished tasks, as months of history would leave them (one statement)."""
    conn.execute(
        """
        INSERT INTO taskq.tasks (task_type, payload, status, started_at, finished_at,
                                 effective_id, worker_id, created_at, updated_at, scheduled_at)
        SELECT 'bench.history',
               jsonb_build_object('order_id', i, 'note', repeat('h', 150)),
               'SUCCESS', t, t + interval '5 ms', gen_random_uuid(), 'history', t, t, t
        FROM generate_series(1, %s) AS i,
             LATERAL (SELECT now() - interval '30 days' + i * interval '1 s') AS s(t)
        """,
        (rows,),
    )


def _us(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}us"


def drain_measurement(scenario: str, case: str, timing: DrainTiming, **details: Any) -> Measurement:
    d = {**details, **timing.details()}
    note = (
        f"{timing.rate_from_spawn:,.0f}/s from spawn; batch claim {d['avg_claim_batch']}, "
        f"complete {d['avg_completion_batch']}; CPU/task: worker "
        f"{_us(timing.worker_cpu_us_per_task)}, db {_us(timing.db_cpu_us_per_task)}"
    )
    if len(timing.runs) > 1:
        note += f"; best of {len(timing.runs)} ({min(timing.runs):,.0f}-{max(timing.runs):,.0f})"
    return Measurement(scenario, case, round(timing.rate_steady, 1), "tasks/s", d, note)


# --- enqueue ----------------------------------------------------------------------------------


def _autocommit_enqueues(auto: psycopg.Connection[Any], start: int, count: int) -> float:
    """Seconds for ``count`` ``app.enqueue`` calls on an autocommit connection: each INSERT is
    its own transaction, one round trip (how PgQueuer's ``Queries.enqueue`` runs)."""
    t0 = time.perf_counter()
    for i in range(start, start + count):
        apps.app.enqueue(auto, "bench.noop", payload_200(i))
    return time.perf_counter() - t0


def enqueue_autocommit_rate(ctx: Context, count: int) -> float:
    """Tasks/s of ``count`` autocommitted enqueues on an emptied table. ``versus`` alternates
    it with PgQueuer's."""
    with db_connect(ctx.dsn) as admin:
        reset_tasks(admin)
        settle(admin)
    with db_connect(ctx.dsn) as auto:
        return count / _autocommit_enqueues(auto, 0, count)


def enqueue_single(ctx: Context) -> list[Measurement]:
    n = 500 if ctx.quick else 5_000
    rounds = 5
    per_round = n // rounds
    elapsed = {"taskq": 0.0, "raw": 0.0, "autocommit": 0.0}
    app = apps.app
    with db_connect(ctx.dsn) as admin:
        reset_tasks(admin)
        settle(admin)
    with db_connect(ctx.dsn, autocommit=False) as conn, db_connect(ctx.dsn) as auto:

        def via_autocommit(start: int) -> float:
            return _autocommit_enqueues(auto, start, per_round)

        def via_taskq(start: int) -> float:
            t0 = time.perf_counter()
            for i in range(start, start + per_round):
                app.enqueue(conn, "bench.noop", payload_200(i))
                conn.commit()
            return time.perf_counter() - t0

        def via_raw(start: int) -> float:
            t0 = time.perf_counter()
            for i in range(start, start + per_round):
                conn.execute(
                    "INSERT INTO taskq.tasks (task_type, payload) VALUES (%s, %s::jsonb)",
                    ("bench.noop", json.dumps(payload_200(i))),
                )
                conn.commit()
            return time.perf_counter() - t0

        # Interleaved rounds (taskq, raw, autocommit, then backwards, ...): all three see the
        # same table and the same background noise.
        for r in range(rounds):
            order = [("taskq", via_taskq), ("raw", via_raw), ("autocommit", via_autocommit)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                elapsed[name] += fn(r * per_round)
    done = per_round * rounds
    taskq_rate = done / elapsed["taskq"]
    raw_rate = done / elapsed["raw"]
    ratio = raw_rate / taskq_rate
    auto_rate = done / elapsed["autocommit"]
    return [
        Measurement(
            "enqueue-single",
            "app.enqueue(conn, ...) on an autocommit connection",
            round(auto_rate, 1),
            "tasks/s",
            {"tasks": done, "seconds": round(elapsed["autocommit"], 3)},
            f"{1e3 / auto_rate:.3f} ms per task (one round trip; the peer's mode)",
        ),
        Measurement(
            "enqueue-single",
            "app.enqueue(conn, ...), 1 commit each",
            round(taskq_rate, 1),
            "tasks/s",
            {"tasks": done, "seconds": round(elapsed["taskq"], 3)},
            f"{1e3 / taskq_rate:.3f} ms per task",
        ),
        Measurement(
            "enqueue-single",
            "raw psycopg INSERT, 1 commit each",
            round(raw_rate, 1),
            "tasks/s",
            {"tasks": done, "seconds": round(elapsed["raw"], 3)},
            f"{1e3 / raw_rate:.3f} ms per task",
        ),
        Measurement(
            "enqueue-single",
            "taskq overhead (raw rate / taskq rate)",
            round(ratio, 3),
            "x",
            {"extra_ms_per_task": round(1e3 / taskq_rate - 1e3 / raw_rate, 4)},
            f"{1e3 / taskq_rate - 1e3 / raw_rate:+.3f} ms per task",
        ),
    ]


BULK_CHUNK = 1_000


def enqueue_bulk_rate(ctx: Context, count: int) -> float:
    """Tasks/s of ``count`` tasks through ``app.enqueue_many`` in chunks of ``BULK_CHUNK``, one
    commit each, on an emptied table. ``versus`` alternates it with PgQueuer's batch enqueue."""
    with db_connect(ctx.dsn) as admin:
        reset_tasks(admin)
        settle(admin)
    app = apps.app
    with db_connect(ctx.dsn, autocommit=False) as conn:
        t0 = time.perf_counter()
        for start in range(0, count, BULK_CHUNK):
            items = [
                {"task_type": "bench.noop", "payload": payload_200(i)}
                for i in range(start, min(count, start + BULK_CHUNK))
            ]
            app.enqueue_many(conn, items)
            conn.commit()
        return count / (time.perf_counter() - t0)


def enqueue_bulk(ctx: Context) -> list[Measurement]:
    n = 5_000 if ctx.quick else 50_000
    chunk = BULK_CHUNK
    # Each run starts from an empty table, as PgQueuer's runs do.
    runs = [n / enqueue_bulk_rate(ctx, n) for _ in range(max(1, ctx.repeat))]
    taskq_s = min(runs)
    with db_connect(ctx.dsn) as admin:
        reset_tasks(admin)
        settle(admin)
    with db_connect(ctx.dsn, autocommit=False) as conn:
        t0 = time.perf_counter()
        for start in range(0, n, chunk):
            with conn.cursor().copy("COPY taskq.tasks (task_type, payload) FROM STDIN") as copy:
                for i in range(start, min(n, start + chunk)):
                    copy.write_row(("bench.noop", json.dumps(payload_200(i))))
            conn.commit()
        copy_s = time.perf_counter() - t0
    return [
        Measurement(
            "enqueue-bulk",
            f"app.enqueue_many, chunks of {chunk:,}",
            round(n / taskq_s, 1),
            "tasks/s",
            {
                "tasks": n,
                "chunk": chunk,
                "seconds": round(taskq_s, 3),
                "runs": sorted(round(n / r, 1) for r in runs),
            },
            f"{taskq_s / (n / chunk) * 1e3:.1f} ms per chunk"
            + (
                f"; best of {len(runs)} ({n / max(runs):,.0f}-{n / min(runs):,.0f})"
                if len(runs) > 1
                else ""
            ),
        ),
        Measurement(
            "enqueue-bulk",
            f"raw COPY, chunks of {chunk:,} (reference)",
            round(n / copy_s, 1),
            "tasks/s",
            {"tasks": n, "chunk": chunk, "seconds": round(copy_s, 3)},
            f"enqueue_many is {copy_s / taskq_s:.2f}x COPY's rate",
        ),
    ]


# --- drain ------------------------------------------------------------------------------------


def drain_matrix(ctx: Context) -> list[Measurement]:
    """Each way of running workers drains each backlog size ``ctx.repeat`` times. The sizes
    alternate within a round, in the other order every next round (20k, 100k; 100k, 20k; ...),
    so the flatness row compares drains that ran back to back: run all of one size first and
    the machine's drift between the two halves of the run (on a shared VM, a fifth within half
    an hour) is read as the queue slowing down."""
    sizes = ctx.sizes or ([5_000] if ctx.quick else [20_000, 100_000])
    slot_counts = ctx.slots or [32, 100]
    how = "--processes 2" if ctx.processes_flag else "2 separate workers"
    cases = [(1, slots, False) for slots in slot_counts]
    cases += [(2, slots, False) for slots in slot_counts]
    if ctx.processes_flag:
        # How most deployments run two workers (two units, two containers): compare, once.
        cases += [(2, slots, True) for slots in slot_counts]

    def label(case: tuple[int, int, bool]) -> str:
        processes, _, separate = case
        return "1 proc" if processes == 1 else ("2 separate workers" if separate else how)

    runs: dict[tuple[int, tuple[int, int, bool]], list[DrainTiming]] = {}
    for case in cases:
        processes, slots, separate = case
        case_sizes = sizes[:1] if separate else sizes
        for round_no in range(ctx.repeat):
            for tasks in case_sizes if round_no % 2 == 0 else case_sizes[::-1]:
                ctx.say(f"drain: {tasks:,} tasks, {label(case)}, {slots} slots, run {round_no + 1}")
                runs.setdefault((tasks, case), []).append(
                    drain(ctx, tasks=tasks, processes=processes, slots=slots, separate=separate)
                )
    out: list[Measurement] = []
    for tasks in sizes:
        for case in cases:
            if (tasks, case) not in runs:
                continue
            processes, slots, separate = case
            timing = best_drain(runs[(tasks, case)])
            out.append(
                drain_measurement(
                    "drain",
                    f"{tasks:,} tasks, {label(case)} x {slots} slots",
                    timing,
                    processes=processes,
                    slots=slots,
                    separate_processes=separate or (processes > 1 and not ctx.processes_flag),
                )
            )
            if not separate:
                batches = ctx.shared.setdefault("claim_batches", {})
                batches[(processes, slots)] = timing.tasks / max(1, timing.claims)
    if len(sizes) > 1:
        for case in cases:
            small, large = (runs.get((size, case)) for size in (sizes[0], sizes[-1]))
            if small and large:
                out.append(flatness_measurement(f"{label(case)} x {case[1]} slots", small, large))
    return out


def flatness_measurement(
    label: str, small: list[DrainTiming], large: list[DrainTiming]
) -> Measurement:
    """The larger backlog's steady rate as a share of the smaller's (issue #15's target:
    >= 95 %): the median of each round's own ratio, its two drains run one after the other;
    the ratio of the best runs is in the details."""
    per_round = [
        round(100 * big.rate_steady / few.rate_steady, 1)
        for few, big in zip(small, large, strict=True)
        if few.rate_steady > 0 and big.rate_steady > 0  # NaN when a drain had no steady span
    ]
    best = 100 * best_drain(large).rate_steady / best_drain(small).rate_steady
    return Measurement(
        "flatness",
        f"{label}: rate at {large[0].tasks:,} / at {small[0].tasks:,} tasks",
        round(statistics.median(per_round), 1) if per_round else None,
        "%",
        {"rounds": per_round, "best_over_best": round(best, 1)},
        f"target >= 95; rounds {', '.join(f'{r:.0f}' for r in per_round)}; "
        f"best run over best run {best:.0f} %",
    )


# --- latency ----------------------------------------------------------------------------------


def latency(ctx: Context) -> list[Measurement]:
    """``ctx.repeat`` runs; the one with the lowest p99 is reported, every run's p99 and max
    in ``runs``."""
    found = [latency_once(ctx) for _ in range(max(1, ctx.repeat))]
    return [best_latency(found)]


def best_latency(found: list[Measurement]) -> Measurement:
    def p99(m: Measurement) -> float:
        return float(m.details.get("p99_ms", float("inf")))

    best = min(found, key=p99)
    if len(found) > 1:
        best.details["runs"] = [
            {
                "p50_ms": m.details.get("p50_ms"),
                "p99_ms": m.details.get("p99_ms"),
                "max_ms": m.details.get("max_ms"),
            }
            for m in found
        ]
        best.note += (
            f"; best p99 of {len(found)} runs ({', '.join(f'{p99(m):.2f}' for m in found)})"
        )
    return best


def latency_once(ctx: Context) -> Measurement:
    seconds = latency_seconds(ctx.quick)
    interval = LATENCY_INTERVAL
    latency_file = ctx.log_dir / f"latency-{secrets.token_hex(3)}.txt"
    env = {apps.LATENCY_FILE_ENV: str(latency_file)}
    app = apps.app
    committed: dict[int, int] = {}
    with db_connect(ctx.dsn) as admin:
        reset_tasks(admin)
        settle(admin)
        with Processes(ctx.log_dir) as procs:
            spawn_workers(ctx, procs, processes=1, slots=32, env=env, name="latency")
            wait_listening(ctx.dsn, 1)
            with db_connect(ctx.dsn, autocommit=False) as conn:
                # One warm-up task, waited for: the worker is idle and warm when we start.
                app.enqueue(conn, "bench.latency", {"warmup": True})
                conn.commit()
                wait_drained(admin, procs, tasks=1)
                time.sleep(0.2)
                count = int(seconds / interval)
                offsets = arrivals.offsets(count, interval, random_arrivals=ctx.random_arrivals)
                start = time.monotonic()
                for i, offset in enumerate(offsets):
                    pause = start + offset - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    task_id = app.enqueue(conn, "bench.latency", {"seq": i})
                    conn.commit()
                    committed[task_id] = time.time_ns()  # commit acknowledged
            wait_drained(admin, procs, tasks=len(committed))
    case = "taskq: commit -> handler start" + arrivals.label(ctx.random_arrivals)
    return latency_measurement("latency", case, committed, latency_file)


def read_starts(path: Path) -> dict[int, int]:
    starts: dict[int, int] = {}
    for line in path.read_text().splitlines():
        task_id, ns = line.split()
        starts.setdefault(int(task_id), int(ns))
    return starts


def latency_measurement(
    scenario: str, case: str, committed: dict[int, int], starts_file: Path
) -> Measurement:
    starts = read_starts(starts_file)
    missing = [t for t in committed if t not in starts]
    ms = [(starts[t] - c) / 1e6 for t, c in committed.items() if t in starts]
    if not ms:
        return Measurement(scenario, case, None, "ms", {"missing": len(missing)}, "no samples")
    details = {
        "samples": len(ms),
        "missing": len(missing),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "min_ms": round(min(ms), 3),
    }
    note = (
        f"p95 {details['p95_ms']:.2f}, p99 {details['p99_ms']:.2f}, "
        f"max {details['max_ms']:.2f} ms; n={len(ms)}"
    )
    return Measurement(scenario, f"{case} (p50)", details["p50_ms"], "ms", details, note)


# --- table growth -----------------------------------------------------------------------------


def table_growth(ctx: Context) -> list[Measurement]:
    tasks = 5_000 if ctx.quick else 20_000
    histories = [0, 100_000] if ctx.quick else [0, 100_000, 1_000_000]
    cases: list[tuple[str, dict[str, Any]]] = [
        (f"{h:,} SUCCESS rows in the table", {"history": h}) for h in histories
    ]
    cases.append(("0 rows + an open transaction (xmin held)", {"hold_xmin": True}))
    out: list[Measurement] = []
    empty: DrainTiming | None = None
    for case, options in cases:
        ctx.say(f"table-growth: {tasks:,} tasks, {case}")
        timing = drain_repeated(ctx, tasks=tasks, processes=1, slots=32, **options)
        empty = empty or timing
        m = drain_measurement(
            "table-growth",
            case,
            timing,
            history_rows=options.get("history", 0),
            hold_xmin=options.get("hold_xmin", False),
            processes=1,
            slots=32,
        )
        # Wall rate (noisy on a shared machine) and database CPU per task (steadier).
        m.details["ratio_to_empty"] = round(timing.rate_steady / empty.rate_steady, 3)
        db, db_empty = timing.db_cpu_us_per_task, empty.db_cpu_us_per_task
        m.details["db_cpu_ratio_to_empty"] = round(db / db_empty, 3) if db and db_empty else None
        m.note = (
            f"{m.details['ratio_to_empty']:.2f}x empty's rate, "
            f"{m.details['db_cpu_ratio_to_empty'] or 0:.2f}x its db CPU/task; " + m.note
        )
        out.append(m)
    return out


# --- memory -----------------------------------------------------------------------------------


def memory(ctx: Context) -> list[Measurement]:
    tasks = 10_000 if ctx.quick else 100_000
    blob_chars = 10_000
    blobs = [secrets.token_urlsafe(blob_chars * 3 // 4)[:blob_chars] for _ in range(64)]
    with db_connect(ctx.dsn) as conn:
        reset_tasks(conn)
        settle(conn)
        with Processes(ctx.log_dir) as procs:
            (pid,) = spawn_workers(ctx, procs, processes=1, slots=32, name="memory")
            wait_listening(ctx.dsn, 1)
            time.sleep(0.5)
            idle_kib = proc_status(pid).get("VmRSS", 0)
            ctx.say(f"memory: inserting {tasks:,} tasks of ~10 KB (one statement)")
            # Random base64: incompressible, so TOAST stores the full 10 KB per row.
            conn.execute(
                "INSERT INTO taskq.tasks (task_type, payload)"
                " SELECT 'bench.noop',"
                "        jsonb_build_object('i', i, 'blob', (%s::text[])[1 + i %% 64])"
                " FROM generate_series(1, %s) AS i",
                (blobs, tasks),
            )
            committed_ns = time.time_ns()  # autocommit: the worker is woken now
            meter = CpuMeter(ctx.dsn, lambda: [pid])
            meter.start()
            peak_sampled = [idle_kib]

            def sample() -> None:
                peak_sampled[0] = max(peak_sampled[0], proc_status(pid).get("VmRSS", 0))

            polled_ns = wait_drained(conn, procs, tasks=tasks, on_poll=sample)
            meter.stop()
            status = proc_status(pid)
        timing = drain_timing(conn, committed_ns, polled_ns)
        timing.worker_cpu_s, timing.db_cpu_s = meter.client_seconds, meter.server_seconds
        row = conn.execute(
            "SELECT avg(pg_column_size(payload))::int"
            " FROM (SELECT payload FROM taskq.tasks LIMIT 1000) AS sample"
        ).fetchone()
    hwm_kib = status.get("VmHWM", 0)
    details = {
        "tasks": tasks,
        "payload_bytes_stored": row[0] if row else None,
        "idle_rss_mib": round(idle_kib / 1024, 1),
        "peak_rss_sampled_mib": round(peak_sampled[0] / 1024, 1),
        "vm_hwm_mib": round(hwm_kib / 1024, 1),
        "rss_at_end_mib": round(status.get("VmRSS", 0) / 1024, 1),
        **timing.details(),
    }
    return [
        Measurement(
            "memory",
            f"worker peak RSS (VmHWM), {tasks:,} x 10 KB, 32 slots",
            details["vm_hwm_mib"],
            "MiB",
            details,
            f"idle {details['idle_rss_mib']} MiB, end {details['rss_at_end_mib']} MiB; "
            f"drained at {timing.rate_steady:,.0f} tasks/s "
            f"({timing.rate_steady * blob_chars / 1e6:.0f} MB/s of payload); CPU/task: worker "
            f"{_us(timing.worker_cpu_us_per_task)}, db {_us(timing.db_cpu_us_per_task)}",
        )
    ]


# --- failure storm ----------------------------------------------------------------------------


def storm_drain(
    ctx: Context, *, task_type: str, tasks: int, slots: int, attempts: int = 1
) -> dict[str, Any]:
    """Drain ``tasks`` tasks of ``task_type`` (``attempts`` attempts each) through one
    ``bench.storm_worker`` (protection off) and measure the CPU of the database backends
    serving it, from the moment the worker sits ready on an empty queue (start-up excluded)
    until the last task is done."""
    with db_connect(ctx.dsn) as conn:
        reset_tasks(conn)
        reset_protection(conn)
        settle(conn)
        with Processes(ctx.log_dir) as procs:
            procs.spawn(
                [sys.executable, "-m", "bench.storm_worker", ctx.dsn, str(slots)],
                name=f"storm-{task_type}",
            )
            wait_listening(ctx.dsn, 1)
            time.sleep(0.5)  # the first poll and control refresh are behind us
            meter = CpuMeter(ctx.dsn, lambda: [p.pid for p in procs.procs])
            counters = db_counters(conn)
            meter.start()
            started = time.monotonic()
            load_noop_backlog(conn, tasks, task_type=task_type)
            wait_drained(conn, procs, tasks=tasks)
            meter.stop()
            seconds = time.monotonic() - started
        time.sleep(0.5)  # the worker's backends exit and publish their statistics
        db = per_task(counters, db_counters(conn), tasks)
        counts = dict(
            conn.execute("SELECT status, count(*) FROM taskq.tasks GROUP BY status").fetchall()
        )
    return {
        "tasks": tasks,
        "seconds": round(seconds, 3),
        "db_cpu_s": round(meter.server_seconds, 3),
        "worker_cpu_s": round(meter.client_seconds, 3),
        "db_cpu_ms_per_task": round(1000 * meter.server_seconds / tasks, 4),
        "attempts": tasks * attempts,
        "db_cpu_ms_per_attempt": round(1000 * meter.server_seconds / (tasks * attempts), 4),
        "statuses": counts,
        **db,
    }


STORM_ROUNDS = 5


def storm_rounds(ctx: Context) -> int:
    """``--repeat`` rounds, and at least five in a full run. A round's drains take 2-4 s each,
    so one busy second on a shared 2-core machine moves a round's ratio by a fifth or more
    (rounds of 1.32-1.86 in one run at 3bf71f2); five rounds take about a minute (57-65 s)."""
    return max(1, ctx.repeat) if ctx.quick else max(STORM_ROUNDS, ctx.repeat)


def failure_storm(ctx: Context) -> list[Measurement]:
    """Database CPU per task when every task fails, against the same drain where every task
    succeeds: failures are written in batches like successes (mark_failed_many, one statement
    per flush), so a failure storm must not cost the database much more than a good day.

    Database CPU is the user + system time, read from /proc/<pid>/stat, of the PostgreSQL
    backends connected to the bench database other than the bench's own (CpuMeter): the
    worker's pool, LISTEN and heartbeat connections. pg_stat_statements would give execution
    time only (not parsing, not the protocol) and needs a preloaded library; /proc counts
    everything the backends do for the worker. Same machine only."""
    tasks = 3_000 if ctx.quick else 20_000
    slots = 32
    runs: dict[str, list[dict[str, Any]]] = {"success": [], "failure": [], "retry": []}
    try:
        for _ in range(storm_rounds(ctx)):
            runs["success"].append(
                storm_drain(ctx, task_type="bench.noop", tasks=tasks, slots=slots)
            )
            runs["failure"].append(
                storm_drain(ctx, task_type="bench.fail", tasks=tasks, slots=slots)
            )
            # Fail and retry: a third of the tasks, three attempts each (two retries at once).
            runs["retry"].append(
                storm_drain(ctx, task_type="bench.retry", tasks=tasks // 3, slots=slots, attempts=3)
            )
    finally:
        with db_connect(ctx.dsn) as conn:
            reset_protection(conn)  # the later scenarios' workers must not inherit the storm
    per_attempt = {
        kind: statistics.median(r["db_cpu_ms_per_attempt"] for r in found)
        for kind, found in runs.items()
    }
    ratio = per_attempt["failure"] / per_attempt["success"] if per_attempt["success"] else None
    retry_ratio = per_attempt["retry"] / per_attempt["success"] if per_attempt["success"] else None
    # Each round ran its three drains back to back, so a round's own ratio is the machine's
    # drift left out, as the alternated pairs of `versus` are.
    by_round = {kind: _round_ratios(runs[kind], runs["success"]) for kind in ("failure", "retry")}
    ctx.say(
        f"failure storm: db CPU per task {per_attempt['failure']:.4f} ms failing vs "
        f"{per_attempt['success']:.4f} ms succeeding (x{ratio:.2f}); per attempt "
        f"{per_attempt['retry']:.4f} ms failing and retried (x{retry_ratio:.2f})"
        if ratio is not None and retry_ratio is not None
        else "failure storm: no CPU measured"
    )
    return [
        Measurement(
            "failure-storm",
            "db CPU per task, all succeed",
            per_attempt["success"],
            "ms",
            {"runs": runs["success"]},
        ),
        Measurement(
            "failure-storm",
            "db CPU per task, all fail",
            per_attempt["failure"],
            "ms",
            {"runs": runs["failure"]},
        ),
        Measurement(
            "failure-storm",
            "ratio fail / succeed",
            round(ratio, 3) if ratio is not None else None,
            "x",
            {"round_ratios": by_round["failure"]},
            _storm_note(by_round["failure"]),
        ),
        Measurement(
            "failure-storm",
            "db CPU per attempt, all fail and retry twice",
            per_attempt["retry"],
            "ms",
            {"runs": runs["retry"]},
        ),
        Measurement(
            "failure-storm",
            "ratio fail and retry / succeed (per attempt)",
            round(retry_ratio, 3) if retry_ratio is not None else None,
            "x",
            {"round_ratios": by_round["retry"]},
            _storm_note(by_round["retry"]),
        ),
    ]


def _round_ratios(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> list[float]:
    """Each round's database CPU per attempt against the same round's succeeding drain."""
    return [
        round(run["db_cpu_ms_per_attempt"] / base["db_cpu_ms_per_attempt"], 2)
        for run, base in zip(runs, baseline, strict=True)
        if base["db_cpu_ms_per_attempt"]
    ]


def _storm_note(ratios: list[float]) -> str:
    """The target, and the rounds' own ratios with their median (the ratio of the medians is
    the row's value)."""
    if len(ratios) < 2:
        return "target <= 1.5"
    listed = ", ".join(f"{r:.2f}" for r in ratios)
    return f"target <= 1.5; rounds {listed}, median {statistics.median(ratios):.2f}"
