"""taskq's benchmark suite: one command, a table, and JSON.

    python bench/run.py [--dsn DSN] [--quick] [--only SCENARIO ...] [--peer] [--oban]
                        [--pgbench] [--py-spy PATH] [--perf PATH] [--repeat N] [--snapshot REV]
                        [--json-out bench/results/latest.json]

It creates its own databases (``taskq_bench_<run>_*``) on the server ``--dsn`` points at
(default ``$TASKQ_BENCH_DSN``, else ``postgresql://root@127.0.0.1:5432/test``) and drops them at
the end; every worker process it starts is killed, group and all, even on error. Numbers are
printed, never asserted. See bench/README.md for what each scenario measures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from rich.console import Console
from rich.table import Table

import taskq
from bench import ceiling, peer_oban, peer_pgqueuer, pgbench_ref, scenarios
from bench.harness import (
    DEFAULT_DSN,
    REPO,
    Databases,
    Measurement,
    Processes,
    Skipped,
    extract_snapshot,
    machine_speed,
    server_info,
    worker_supports_processes,
)
from bench.scenarios import Context

RESULTS = REPO / "bench" / "results"
REVISION_ENV = "TASKQ_BENCH_REVISION"
CORE = [
    "enqueue-single",
    "enqueue-bulk",
    "drain",
    "latency",
    "table-growth",
    "memory",
    "failure-storm",
    "ceiling",
]
OPT_IN = ["pgbench", "peer", "versus", "oban", "profile", "dbprofile"]

Scenario = Callable[[Context], list[Measurement]]


def run_ceiling(ctx: Context) -> list[Measurement]:
    tasks = 5_000 if ctx.quick else 20_000
    batches = {1, 32, 100}
    # Plus the claim batch the workers were seen to use, unless one of those is close enough.
    for seen in ctx.shared.get("claim_batches", {}).values():
        if seen >= 1 and all(abs(seen - b) > 0.1 * b for b in batches):
            batches.add(round(seen))
    with Processes(ctx.log_dir) as procs:
        return ceiling.ceiling_measurements(
            ctx.dsn, procs, tasks=tasks, batches=sorted(batches), say=ctx.say
        )


def build_scenarios(args: argparse.Namespace, dbs: Databases) -> dict[str, Scenario]:
    def pgbench(ctx: Context) -> list[Measurement]:
        return pgbench_ref.run_pgbench(ctx.dsn, ctx.log_dir, quick=ctx.quick, say=ctx.say)

    def peer(ctx: Context) -> list[Measurement]:
        return peer_pgqueuer.run_peer(
            dbs.create,
            ctx.log_dir,
            quick=ctx.quick,
            say=ctx.say,
            repeat=ctx.repeat,
            sizes=ctx.sizes,
            random_arrivals=ctx.random_arrivals,
        )

    def oban(ctx: Context) -> list[Measurement]:
        return peer_oban.run_oban(
            dbs.create,
            ctx.log_dir,
            quick=ctx.quick,
            say=ctx.say,
            repeat=ctx.repeat,
            ours=lambda: scenarios.latency_once(ctx),
            random_arrivals=ctx.random_arrivals,
        )

    def versus(ctx: Context) -> list[Measurement]:
        from bench.versus import run_versus

        return run_versus(ctx, dbs.create, rounds=ctx.repeat)

    def profile(ctx: Context) -> list[Measurement]:
        from bench.profile import profile_drain

        if not args.py_spy:
            raise Skipped("pass --py-spy PATH (py-spy installed in a venv outside the repo)")
        return profile_drain(ctx, args.py_spy, args.json_out.parent)

    def dbprofile(ctx: Context) -> list[Measurement]:
        from bench.dbprofile import profile_database

        if not args.perf:
            raise Skipped("pass --perf PATH (Linux perf; root or perf_event_paranoid <= 0)")
        return profile_database(ctx, args.perf, args.json_out.parent)

    return {
        "enqueue-single": scenarios.enqueue_single,
        "enqueue-bulk": scenarios.enqueue_bulk,
        "drain": scenarios.drain_matrix,
        "latency": scenarios.latency,
        "table-growth": scenarios.table_growth,
        "memory": scenarios.memory,
        "failure-storm": scenarios.failure_storm,
        "ceiling": run_ceiling,
        "pgbench": pgbench,
        "peer": peer,
        "versus": versus,
        "oban": oban,
        "profile": profile,
        "dbprofile": dbprofile,
    }


def selected(args: argparse.Namespace) -> list[str]:
    if args.only:
        return [name for name in CORE + OPT_IN if name in args.only]
    chosen = list(CORE)
    if args.pgbench:
        chosen.append("pgbench")
    if args.peer:
        chosen += ["peer", "versus"]
    if args.oban:
        chosen.append("oban")
    if args.py_spy:
        chosen.append("profile")
    if args.perf:
        chosen.append("dbprofile")
    return chosen


# --- derived ratios -----------------------------------------------------------------------------


def ceiling_ratios(results: list[Measurement]) -> list[Measurement]:
    """Each drain's steady rate as a share of the ceiling measured in this run with the same
    number of processes and the batch size closest to the worker's observed claim batch."""
    ceilings = [m for m in results if m.scenario == "ceiling" and m.value]
    out: list[Measurement] = []
    for m in results:
        if m.scenario != "drain" or not m.value:
            continue
        procs = m.details["processes"]
        batch = m.details.get("avg_claim_batch") or m.details["slots"]
        same = [c for c in ceilings if c.details["clients"] == procs]
        if not same:
            continue
        best = min(same, key=lambda c: abs(c.details["batch"] - batch))
        assert best.value is not None
        out.append(
            Measurement(
                "% of ceiling",
                f"drain {m.case} / ceiling {procs} client x batch {best.details['batch']}",
                round(100 * m.value / best.value, 1),
                "%",
                {"drain_tasks_per_s": m.value, "ceiling_tasks_per_s": best.value},
                f"{m.value:,.0f} / {best.value:,.0f} tasks/s",
            )
        )
    return out


def peer_ratios(results: list[Measurement]) -> list[Measurement]:
    """taskq against PgQueuer, measured in this run: drains of the same size and process count
    (taskq's 100 slots against PgQueuer's batch 100), enqueues, CPU per task. Above 1.00x taskq
    is faster (for CPU per task: PgQueuer's CPU / taskq's, so above 1.00x taskq spends less)."""
    peers = [m for m in results if m.scenario == "peer" and m.value]
    out: list[Measurement] = []

    def add(
        case: str, ours: float, theirs: float, detail: str, *, lower_is_better: bool = False
    ) -> None:
        num, den = (theirs, ours) if lower_is_better else (ours, theirs)
        out.append(
            Measurement(
                "vs PgQueuer",
                case,
                round(num / den, 3) if den else None,
                "x",
                {"taskq": ours, "pgqueuer": theirs},
                detail,
            )
        )

    for m in results:
        if m.scenario != "drain" or not m.value or m.details.get("slots") != 100:
            continue
        if m.details.get("separate_processes") and m.details["processes"] > 1:
            continue
        tasks, procs = m.details["tasks"], m.details["processes"]
        for p in peers:
            d = p.details
            if (d.get("tasks"), d.get("processes"), d.get("batch_size")) != (tasks, procs, 100):
                continue
            assert p.value is not None
            add(
                f"drain {tasks:,}, {procs} proc (100 slots / batch 100)",
                m.value,
                p.value,
                f"{m.value:,.0f} / {p.value:,.0f} tasks/s",
            )
            ours_cpu = m.details.get("worker_cpu_us_per_task")
            theirs_cpu = d.get("worker_cpu_us_per_task")
            if ours_cpu and theirs_cpu:
                add(
                    f"worker CPU/task, drain {tasks:,}, {procs} proc (theirs / ours)",
                    ours_cpu,
                    theirs_cpu,
                    f"{ours_cpu:.1f} us (taskq) vs {theirs_cpu:.1f} us",
                    lower_is_better=True,
                )
            ours_db, theirs_db = m.details.get("db_cpu_us_per_task"), d.get("db_cpu_us_per_task")
            if ours_db and theirs_db:
                add(
                    f"db CPU/task, drain {tasks:,}, {procs} proc (theirs / ours)",
                    ours_db,
                    theirs_db,
                    f"{ours_db:.1f} us (taskq) vs {theirs_db:.1f} us",
                    lower_is_better=True,
                )
    pairs = (
        (
            "enqueue-single",
            "app.enqueue(conn, ...) on an autocommit",
            "1 job per call",
            "enqueue, 1 per transaction (autocommit, both)",
        ),
        ("enqueue-bulk", "app.enqueue_many", "lists of 1,000", "enqueue, 1,000 per call"),
    )
    for scenario, ours_case, theirs_case, label in pairs:
        ours = next(
            (m for m in results if m.scenario == scenario and m.case.startswith(ours_case)), None
        )
        theirs = next((p for p in peers if theirs_case in p.case), None)
        if ours and theirs and ours.value and theirs.value:
            add(label, ours.value, theirs.value, f"{ours.value:,.0f} / {theirs.value:,.0f} /s")
    return out


def oban_ratios(results: list[Measurement]) -> list[Measurement]:
    """taskq's latency against oban-py's, measured in this run: p99 and max of *commit ->
    handler start*, oban-py's / taskq's (lower is better, so above 1.00x taskq is faster, as for
    the CPU-per-task rows against PgQueuer)."""
    ours = next((m for m in results if m.scenario == "latency" and m.value is not None), None)
    theirs = next((m for m in results if m.scenario == "oban" and m.value is not None), None)
    out: list[Measurement] = []
    if ours is not None and theirs is not None:
        for key, what in (("p99_ms", "p99"), ("max_ms", "max")):
            a, b = ours.details.get(key), theirs.details.get(key)
            if not a or not b:
                continue
            out.append(
                Measurement(
                    "vs oban-py",
                    f"latency {what}, commit -> handler start (theirs / ours)",
                    round(b / a, 3),
                    "x",
                    {"taskq": a, "oban-py": b},
                    f"{a:.2f} ms (taskq) vs {b:.2f} ms",
                )
            )
    paired = next((m for m in results if m.scenario == "oban-pairs"), None)
    pairs = paired.details.get("pairs", []) if paired else []
    for key, what in (("p50_ms", "p50"), ("p99_ms", "p99"), ("max_ms", "max")):
        ratios = [p["oban-py"][key] / p["taskq"][key] for p in pairs if p["taskq"][key]]
        if not ratios:
            continue
        out.append(
            Measurement(
                "vs oban-py",
                f"latency {what}, alternated pairs (theirs / ours)",
                round(statistics.median(ratios), 3),
                "x",
                {"ratios": [round(r, 3) for r in ratios], "pairs": pairs},
                f"median of {len(ratios)} pairs ({', '.join(f'{r:.2f}' for r in ratios)}); "
                + ", ".join(f"{p['taskq'][key]:.2f}/{p['oban-py'][key]:.2f}" for p in pairs)
                + " ms (taskq/oban-py)",
            )
        )
    return out


# --- output -------------------------------------------------------------------------------------


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("tasks/s",):
        return f"{value:,.0f}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.1f}%"
    return f"{value:,.2f}"


def render(console: Console, results: list[Measurement], meta: dict[str, Any]) -> None:
    server = meta["server"]
    title = (
        f"taskq {meta['taskq_version']} ({meta['git']}) - PostgreSQL {server['server_version']}, "
        f"{meta['cpus']} CPUs, synchronous_commit={server['synchronous_commit']}, "
        f"autovacuum={server['autovacuum']}, load avg at start "
        f"{meta['loadavg_at_start'][0]:.2f}, 10M Python additions "
        f"{meta['python_10m_additions_s']:.2f} s{' - QUICK' if meta['quick'] else ''}"
    )
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("scenario", style="bold")
    table.add_column("case")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("details")
    previous = None
    for m in results:
        if previous is not None and m.scenario != previous:
            table.add_section()
        previous = m.scenario
        style = "red" if m.value is None and m.note.startswith("FAILED") else None
        table.add_row(m.scenario, m.case, fmt(m.value, m.unit), m.unit, m.note, style=style)
    console.print(table)
    for m in results:
        if m.scenario == "profile" and "top_self_pct" in m.details:
            render_profile(console, m.details)
        if m.scenario == "dbprofile" and "statements_pct" in m.details:
            render_dbprofile(console, m.details)


def render_profile(console: Console, d: dict[str, Any]) -> None:
    tables = (
        ("self_by_package_pct", "on-CPU samples by package (leaf frame)"),
        ("top_self_pct", "top functions, self (leaf frame)"),
        ("taskq_inclusive_pct", "taskq functions, inclusive (anywhere on the stack)"),
    )
    for key, label in tables:
        prof = Table(
            title=f"py-spy, one drain worker: {label}; {d['samples']:,} samples, "
            f"{d['waiting_in_epoll_pct']}% of them parked in epoll (not shown)",
            title_justify="left",
        )
        prof.add_column("% of samples", justify="right")
        prof.add_column("function (file)" if key != "self_by_package_pct" else "package")
        for name, pct in d[key]:
            prof.add_row(f"{pct:.1f}", name)
        console.print(prof)


def render_dbprofile(console: Console, d: dict[str, Any]) -> None:
    prof = Table(
        title=f"perf, the drain worker's PostgreSQL backends: {d['samples']:,} samples by "
        "statement, and the parts of each (a sample counts in every part on its stack)",
        title_justify="left",
    )
    prof.add_column("% of samples", justify="right")
    prof.add_column("statement")
    prof.add_column("parts, % of all samples")
    for name, pct, parts in d["statements_pct"]:
        prof.add_row(f"{pct:.1f}", name, ", ".join(f"{p} {v:.1f}" for p, v in parts))
    console.print(prof)


def git_describe() -> str:
    if os.environ.get(REVISION_ENV):
        return os.environ[REVISION_ENV]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "taskq", "sql"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}{'+dirty' if dirty else ''}" if head else "unknown"


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="Benchmark taskq against a real PostgreSQL (its own throwaway databases).",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TASKQ_BENCH_DSN", DEFAULT_DSN),
        help="server to use (any database on it; the benchmark creates and drops its own). "
        "Default: $TASKQ_BENCH_DSN, else %(default)s",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: every core scenario in about a minute"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=CORE + OPT_IN,
        metavar="SCENARIO",
        help=f"run only these: {', '.join(CORE + OPT_IN)}",
    )
    parser.add_argument(
        "--peer",
        action="store_true",
        help=f"also run PgQueuer (installs it in {peer_pgqueuer.PEER_VENV}): its own "
        "scenarios, then its drains and taskq's alternated pair by pair (versus)",
    )
    parser.add_argument(
        "--oban",
        action="store_true",
        help=f"also measure oban-py's dispatch latency (installs it in {peer_oban.OBAN_VENV}; "
        "needs a Python >= 3.12)",
    )
    parser.add_argument("--pgbench", action="store_true", help="also run the pgbench reference")
    parser.add_argument(
        "--random-arrivals",
        action="store_true",
        help="latency runs (taskq's and the peers') enqueue at random (Poisson) instants of the "
        "same mean rate, one seed for all, instead of one task every 20 ms",
    )
    parser.add_argument(
        "--py-spy", metavar="PATH", help="also profile one drain worker with this py-spy binary"
    )
    parser.add_argument(
        "--perf",
        metavar="PATH",
        help="also profile the drain worker's PostgreSQL backends with this Linux perf binary",
    )
    parser.add_argument(
        "--json-out", type=Path, default=RESULTS / "latest.json", help="default: %(default)s"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each drain (drain, table-growth) N times and report the median (default 1)",
    )
    parser.add_argument(
        "--snapshot",
        metavar="REV",
        help="benchmark the committed revision REV (e.g. HEAD) from a temporary copy, so edits "
        "to the working tree during the run change nothing; this bench/ harness is used",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="N",
        help="drain backlog sizes, taskq's and the peer's (default 20000 100000; quick 5000)",
    )
    parser.add_argument(
        "--drain-slots",
        type=int,
        nargs="+",
        metavar="N",
        help="slots per worker in the drain scenario (default 32 100)",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop the databases")
    return parser.parse_args(argv)


def run_snapshot(args: argparse.Namespace, argv: list[str]) -> int:
    """Extract ``git archive REV`` into a temporary folder, lay this harness (bench/) over it,
    and run the benchmark from there with that copy first on PYTHONPATH: the workers, the SQL
    and the migrations are all the snapshot's, whatever happens to the working tree meanwhile."""
    snap = Path(tempfile.mkdtemp(prefix="taskq-bench-snapshot-"))
    try:
        try:
            commit = extract_snapshot(args.snapshot, snap)
        except SystemExit as exc:
            print(f"--snapshot: {exc}", file=sys.stderr)
            return 2
        (snap / "bench").mkdir(exist_ok=True)
        for path in (REPO / "bench").iterdir():
            if path.is_file() and path.suffix in (".py", ".md"):
                shutil.copy2(path, snap / "bench" / path.name)
        child = [a for a in argv if not a.startswith("--snapshot")]
        if args.snapshot in child:
            child.remove(args.snapshot)
        child += ["--json-out", str(args.json_out.resolve())]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(snap), os.environ.get("PYTHONPATH")])),
            REVISION_ENV: f"{commit} snapshot",
        }
        print(f"benchmarking {commit} from {snap}", flush=True)
        proc = subprocess.Popen([sys.executable, str(snap / "bench" / "run.py"), *child], env=env)
        try:
            return proc.wait()
        except KeyboardInterrupt:  # Ctrl-C reached the child too: let it clean up
            return proc.wait()
        except SystemExit:  # our SIGTERM: pass it on, then wait for its cleanup
            proc.terminate()
            proc.wait()
            raise
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: every `finally` runs, so workers die and databases go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.snapshot:
        return run_snapshot(args, argv)
    console = Console(width=None if sys.stdout.isatty() else 200)
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="taskq-bench-"))
    dbs = Databases(args.dsn)
    results: list[Measurement] = []
    failures = 0
    started = time.monotonic()
    try:
        server = server_info(args.dsn)
    except psycopg.Error as exc:
        console.print(f"[red]cannot reach PostgreSQL at {args.dsn}: {exc}[/red]")
        return 3
    meta: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "repeat": args.repeat,
        "taskq_version": taskq.__version__,
        "taskq_path": str(Path(taskq.__file__).resolve().parent),
        "git": git_describe(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "cpus": os.cpu_count(),
        "server": server,
        "worker_has_processes_flag": worker_supports_processes(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python_10m_additions_s": machine_speed(),
    }
    if meta["loadavg_at_start"][0] > 0.5:
        console.print(
            f"[yellow]load average {meta['loadavg_at_start'][0]:.2f}: something else is "
            "using the CPUs; the numbers will be noisy[/yellow]"
        )
    names = selected(args)
    try:
        dsn = dbs.create("taskq")
        from taskq.db.migrate import upgrade

        upgrade(dsn)
        ctx = Context(
            dsn=dsn,
            quick=args.quick,
            log_dir=log_dir,
            console=console,
            processes_flag=meta["worker_has_processes_flag"],
            repeat=max(1, args.repeat),
            sizes=args.sizes,
            slots=args.drain_slots,
            random_arrivals=args.random_arrivals,
        )
        table = build_scenarios(args, dbs)
        for name in names:
            console.rule(name)
            t0 = time.monotonic()
            try:
                found = table[name](ctx)
            except Skipped as why:
                console.log(f"[yellow]{name} skipped: {why}[/yellow]")
                found = [Measurement(name, "skipped", None, "", {"reason": str(why)}, str(why))]
            except Exception as exc:  # report, keep going with the other scenarios
                failures += 1
                console.log(f"[red]{name} failed[/red]\n{traceback.format_exc()}")
                found = [
                    Measurement(name, "error", None, "", {"error": repr(exc)}, f"FAILED: {exc}")
                ]
            for m in found:
                m.details.setdefault("scenario_seconds", round(time.monotonic() - t0, 1))
            results.extend(found)
        results.extend(ceiling_ratios(results))
        results.extend(peer_ratios(results))
        results.extend(oban_ratios(results))
    finally:
        if args.keep_db:
            console.log(f"kept databases: {', '.join(dbs.created)}")
        else:
            dbs.drop_all()
    meta["seconds"] = round(time.monotonic() - started, 1)
    meta["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["scenarios"] = names
    console.rule("results")
    render(console, results, meta)
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(
        json.dumps({"meta": meta, "results": [m.as_dict() for m in results]}, indent=2) + "\n"
    )
    console.print(f"{len(results)} results in {meta['seconds']:.0f}s; JSON: {args.json_out}")
    if failures:
        console.print(f"[red]{failures} scenario(s) failed; worker logs in {log_dir}[/red]")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
