"""The ``taskq`` command. Thin on purpose: parse, call one domain function, render, exit.

Exit codes: 0 success; 1 bad input or a refused operation; 2 usage error (click); 3 the
database is unavailable. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console
from rich.table import Table

from taskq import dlq as dlq_ops
from taskq import logs
from taskq.app import App, load_app
from taskq.config import resolve_dsn
from taskq.db import connect_plain, first_line, session
from taskq.errors import ConfigError, DatabaseUnavailable, TaskqError
from taskq.memory import parse_size
from taskq.protection import ProtectionSettings
from taskq.worker import Worker, WorkerSettings, parse_queues

F = TypeVar("F", bound=Callable[..., Any])

# On a terminal rich fits the window; in a pipe (scripts, logs) never cut names short.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def dsn_option(fn: F) -> F:
    return click.option(
        "--dsn",
        envvar="TASKQ_DSN",
        help="PostgreSQL connection string. Default: $TASKQ_DSN, else the embedded server.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="taskq")
def cli() -> None:
    """taskq: a PostgreSQL-only job queue. The taskq.tasks table is the queue."""
    # Commands print their results on stdout; log events (warnings) go to stderr. The worker
    # reconfigures this with its --log-format / --log-level.
    logs.configure("auto", "warning")


# --- migrate -------------------------------------------------------------------------------


@cli.command()
@dsn_option
@click.option("--sql", "as_sql", is_flag=True, help="Print the SQL instead of running it.")
@click.option("--revision", default="head", show_default=True, help="Target revision.")
@click.option(
    "--roles",
    "with_roles",
    is_flag=True,
    help="Then create the roles taskq_enqueuer, taskq_worker, taskq_operator if missing and "
    "grant them their privileges (sql/roles.sql; needs the schema owner with CREATEROLE).",
)
def migrate(dsn: str | None, as_sql: bool, revision: str, with_roles: bool) -> None:
    """Create or upgrade the taskq schema (safe to run from many hosts at once)."""
    from taskq import migrate as migrations  # alembic is slow to import; only load it here

    if as_sql:
        click.echo(migrations.sql_script(revision))
        if with_roles:
            click.echo(migrations.roles_sql_script())
        return
    target = resolve_dsn(dsn)
    migrations.upgrade(target, revision)
    click.echo(f"taskq schema is at {revision}")
    if with_roles:
        migrations.apply_roles(target)
        click.echo(f"roles granted: {', '.join(migrations.ROLE_NAMES)}")


# --- worker --------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--app",
    "app_spec",
    required=True,
    envvar="TASKQ_APP",
    help="Where the App is: module:attribute. Default: $TASKQ_APP.",
)
@click.option(
    "--queues",
    default=None,
    envvar="TASKQ_QUEUES",
    help="Queues and their concurrency, e.g. sms=8,sync=32. Default: $TASKQ_QUEUES, else every "
    "queue the app's tasks use, 10 slots each.",
)
@dsn_option
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between fallback polls (NOTIFY wakes workers sooner).",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="On SIGTERM, seconds to let in-flight tasks finish before giving them back. Keep it "
    "below systemd's TimeoutStopSec.",
)
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(min=0.05),
    default=10.0,
    show_default=True,
    help="Seconds between heartbeats. The lease is 3 heartbeats: a dead worker's tasks are "
    "rescued that long after it stopped.",
)
@click.option(
    "--reaper-interval",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds between reaper passes (one pass at a time across all workers).",
)
@click.option(
    "--timeout-grace",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="The reaper rescues an attempt this many seconds after its timeout.",
)
@click.option(
    "--max-memory",
    default=None,
    help="Stop claiming while resident memory is above this (e.g. 512M, 2G).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    envvar="TASKQ_METRICS_PORT",
    help="Serve Prometheus metrics on this port (/metrics).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address for --metrics-port (loopback by default; 0.0.0.0 to expose).",
)
@click.option(
    "--prune-after",
    default=None,
    help="Delete SUCCESS rows older than this (e.g. 7d), on the leader every 10 minutes.",
)
@click.option(
    "--breaker-threshold",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Consecutive failures of a task type that open its circuit breaker.",
)
@click.option(
    "--breaker-cooldown",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds an open breaker waits before letting one probe through.",
)
@click.option("--log-payloads", is_flag=True, help="Include payloads in task log events.")
@click.option(
    "--processes",
    default="1",
    show_default=True,
    envvar="TASKQ_PROCESSES",
    help="Run N worker processes under a supervisor that restarts the ones that die ('auto': "
    "one per CPU). Each gets the --queues slots; with --metrics-port P, process i serves P+i.",
)
@click.option(
    "--pgbouncer",
    is_flag=True,
    envvar="TASKQ_PGBOUNCER",
    help="--dsn goes through PgBouncer in transaction mode: never prepare statements "
    "server-side. Needs --listen-dsn or --no-listen. Default: $TASKQ_PGBOUNCER.",
)
@click.option(
    "--listen-dsn",
    default=None,
    envvar="TASKQ_LISTEN_DSN",
    help="A direct connection to PostgreSQL for LISTEN (a transaction pooler cannot keep it). "
    "Default: $TASKQ_LISTEN_DSN, else --dsn.",
)
@click.option(
    "--no-listen",
    is_flag=True,
    envvar="TASKQ_NO_LISTEN",
    help="Do not LISTEN; only poll. New tasks then wait up to --poll-interval to start.",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default="auto",
    show_default=True,
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def worker(
    app_spec: str,
    queues: str | None,
    dsn: str | None,
    poll_interval: float,
    shutdown_timeout: float,
    heartbeat_interval: float,
    reaper_interval: float,
    timeout_grace: float,
    max_memory: str | None,
    metrics_port: int | None,
    metrics_host: str,
    prune_after: str | None,
    breaker_threshold: int,
    breaker_cooldown: float,
    log_payloads: bool,
    processes: str,
    pgbouncer: bool,
    listen_dsn: str | None,
    no_listen: bool,
    log_format: str,
    log_level: str,
) -> None:
    """Run a worker process: claim tasks, run their handlers, record the outcome.

    SIGTERM or SIGINT drains gracefully; a second signal gives in-flight tasks back at once.
    """
    logs.configure(log_format, log_level)  # type: ignore[arg-type]
    app = load_app(app_spec)
    try:
        memory_limit = parse_size(max_memory) if max_memory else None
    except ValueError as exc:
        raise ConfigError(f"--max-memory: {exc}") from None
    settings = WorkerSettings(
        queues=parse_queues(queues) if queues else {},
        poll_interval_seconds=poll_interval,
        shutdown_timeout_seconds=shutdown_timeout,
        heartbeat_interval_seconds=heartbeat_interval,
        reaper_interval_seconds=reaper_interval,
        timeout_grace_seconds=timeout_grace,
        max_memory_bytes=memory_limit,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        prune_after_seconds=_duration("--prune-after", prune_after),
        protection=ProtectionSettings(
            breaker_threshold=breaker_threshold, breaker_cooldown_seconds=breaker_cooldown
        ),
        log_payloads=log_payloads,
        pgbouncer=pgbouncer,
        listen=not no_listen,
        listen_dsn=listen_dsn,
    )
    count = _process_count(processes)
    target = resolve_dsn(dsn or app._dsn)
    if count > 1:
        from taskq.supervisor import Supervisor, child_argv

        argv = child_argv(sys.argv[1:])
        if not dsn:
            argv += ["--dsn", target]  # resolved once: the children share one database
        sys.exit(Supervisor(argv, count, drain_seconds=shutdown_timeout).run())
    index = int(os.environ.get("TASKQ_WORKER_INDEX", "0"))
    if settings.metrics_port and index:
        settings = dataclasses.replace(settings, metrics_port=settings.metrics_port + index)
    w = Worker(app, dsn=target, settings=settings)
    asyncio.run(_serve(w))
    if w.threads_busy():
        # A sync handler is still running in a thread we cannot kill; its attempt was given
        # back already. Do not let the interpreter wait for it at exit.
        sys.stderr.flush()
        os._exit(0)


def _process_count(text: str) -> int:
    if text == "auto":
        return os.cpu_count() or 1
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"--processes must be a number or 'auto', got {text!r}") from None
    if value < 1:
        raise ConfigError("--processes must be >= 1")
    return value


def _duration(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    from taskq.stats import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


async def _serve(w: Worker) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, w.request_stop)
    await w.run()


# --- reap and workers ----------------------------------------------------------------------


@cli.command()
@dsn_option
@click.option(
    "--timeout-grace",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Rescue attempts this many seconds past their timeout.",
)
@click.option(
    "--orphan-after",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Rescue attempts whose worker row is missing once they are this old.",
)
@json_option
def reap(dsn: str | None, timeout_grace: float, orphan_after: float, as_json: bool) -> None:
    """One reaper pass now: rescue attempts of dead workers and attempts past their timeout."""
    from taskq.reaper import reap_once

    result = reap_once(
        resolve_dsn(dsn), grace_seconds=timeout_grace, orphan_after_seconds=orphan_after
    )
    if result is None:
        raise ConfigError("another reaper pass is running right now; try again")
    if as_json:
        print_json({"rescued": result.rescued, "forgotten_workers": result.forgotten_workers})
        return
    for row in result.rescued:
        out.print(
            f"{row['id']}  {row['task_type']}  -> {row['status']}  ({row['last_error']})",
            markup=False,
        )
    click.echo(
        f"rescued {len(result.rescued)} attempt(s); "
        f"forgot {len(result.forgotten_workers)} dead worker(s)"
    )


@cli.command()
@dsn_option
@json_option
def workers(dsn: str | None, as_json: bool) -> None:
    """Worker processes known to the database, with their last heartbeat."""
    from taskq import store

    with session(resolve_dsn(dsn)) as conn:
        rows = store.list_workers(conn)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no workers")
        return
    table = Table(title="workers", title_justify="left")
    for col in ("id", "host", "pid", "queues", "version", "started", "last beat", "state"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"],
            r["host"],
            str(r["pid"]),
            json.dumps(r["queues"]),
            r["version"],
            str(r["started_at"])[:19],
            f"{age(r['silent_seconds'])} ago",
            "[green]alive[/green]" if r["alive"] else "[red]lease expired[/red]",
        )
    out.print(table)


@cli.command()
@dsn_option
@click.option("--worker-id", default=None, help="Check this worker (any host).")
@click.option("--pid", type=int, default=None, help="Check the worker with this PID on this host.")
@click.option(
    "--max-silence",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Unhealthy after this many seconds without a heartbeat. Default: the worker's lease "
    "(3 heartbeats).",
)
def health(
    dsn: str | None, worker_id: str | None, pid: int | None, max_silence: float | None
) -> None:
    """Exit 0 when the database answers and the worker heart-beats; for container health checks.

    Without --worker-id or --pid it checks the freshest worker registered with this hostname:
    in a container, the worker of that container. Exit 1: no such worker, or silent too long;
    3: the database did not answer.
    """
    from taskq import health as health_ops

    found = health_ops.check(
        resolve_dsn(dsn), worker_id=worker_id, pid=pid, max_silence_seconds=max_silence
    )
    click.echo(
        f"ok: worker {found.worker_id} (pid {found.pid} on {found.host}) heart-beat "
        f"{found.silent_seconds:.1f}s ago"
    )


# --- enqueue -------------------------------------------------------------------------------


@cli.command()
@click.argument("task_type")
@click.option("--payload", default="{}", show_default=True, help="The payload, as JSON.")
@click.option("--biz-id", default=None, help="Business key (order number, user id...).")
@click.option("--priority", type=int, default=None, help="Larger runs first (default 0).")
@click.option("--queue", default=None, help="Queue name (default 'default').")
@click.option("--delay", type=click.FloatRange(min=0), default=None, help="Seconds from now.")
@dsn_option
@json_option
def enqueue(
    task_type: str,
    payload: str,
    biz_id: str | None,
    priority: int | None,
    queue: str | None,
    delay: float | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Put one task on the queue and print its id."""
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not valid JSON: {exc}") from None
    target = resolve_dsn(dsn)
    with session(target) as conn:
        task_id = App(dsn=target).enqueue(
            conn, task_type, value, biz_id=biz_id, priority=priority, queue=queue, delay=delay
        )
    if as_json:
        print_json({"id": task_id})
    else:
        click.echo(task_id)


# --- show, schedules, reconcile -------------------------------------------------------------


@cli.command()
@click.argument("task_id", type=int)
@dsn_option
@json_option
def show(task_id: int, dsn: str | None, as_json: bool) -> None:
    """One task in full, with the tree of tasks it enqueued (child tasks)."""
    from taskq import store

    target = resolve_dsn(dsn)
    row, audit = dlq_ops.show(target, task_id)
    with session(target) as conn:
        tree = store.task_tree(conn, task_id)
    if as_json:
        print_json({"task": row, "audit": audit, "tree": tree})
        return
    render_task(row, audit)
    if len(tree) > 1:
        out.print("[bold]children[/bold]")
        for node in tree[1:]:
            indent = "  " * node["depth"]
            out.print(
                f"{indent}└ {node['id']}  {node['task_type']}  {node['status']}"
                f"  biz_id={node['biz_id'] or '-'}",
                markup=False,
            )


@cli.command()
@dsn_option
@json_option
def schedules(dsn: str | None, as_json: bool) -> None:
    """Periodic schedules with their last and next runs and missed ticks."""
    from taskq import store

    with session(resolve_dsn(dsn)) as conn:
        rows = store.list_schedules(conn)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no schedules (they appear once a worker with @app.periodic has started)")
        return
    table = Table(title="schedules", title_justify="left")
    for col in (
        "name",
        "task type",
        "spec",
        "tz",
        "catch-up",
        "last tick",
        "last task",
        "next tick",
        "missed",
    ):
        table.add_column(col)
    for r in rows:
        last_task = f"{r['last_task_id']} {r['last_status'] or ''}" if r["last_task_id"] else "-"
        table.add_row(
            r["name"],
            r["task_type"],
            r["spec"],
            r["timezone"],
            r["catch_up"],
            str(r["last_tick"])[:19] if r["last_tick"] else "-",
            last_task,
            str(r["next_tick"])[:19] if r["next_tick"] else "-",
            f"[red]{r['missed_total']}[/red]" if r["missed_total"] else "0",
        )
    out.print(table)


@cli.command()
@click.argument("name", required=False)
@click.option("--app", "app_spec", required=True, help="Where the App is: module:attribute.")
@click.option("--dry-run", is_flag=True, help="Report what is missing; enqueue nothing.")
@dsn_option
@json_option
def reconcile(
    name: str | None, app_spec: str, dry_run: bool, dsn: str | None, as_json: bool
) -> None:
    """Run a reconciler (or all of them) now: enqueue tasks that business rows are missing."""
    from taskq import reconcile as reconciling

    app = load_app(app_spec)
    names = [name] if name else sorted(app.reconcilers)
    if not names:
        raise ConfigError(f"{app_spec} registers no reconcilers")
    reports = []
    with connect_plain(resolve_dsn(dsn or app._dsn), role="reconcile") as conn:
        for each in names:
            reports.append(reconciling.run(app, each, conn, dry_run=dry_run))
            conn.commit()
    if as_json:
        print_json([r.as_dict() for r in reports])
        return
    for r in reports:
        verb = "would enqueue" if dry_run else "enqueued"
        count = len(r.missing) if dry_run else len(r.enqueued)
        shown = ", ".join(r.missing[:10]) + (" ..." if len(r.missing) > 10 else "")
        click.echo(
            f"{r.name}: {r.candidates} key(s) should have a {r.task_type} task; "
            f"{len(r.missing)} missing; {verb} {count}" + (f" ({shown})" if r.missing else "")
        )


# --- stats ---------------------------------------------------------------------------------


# --- dlq -----------------------------------------------------------------------------------


@cli.group()
def dlq() -> None:
    """Operate dead letters: list, show, requeue, discard (every action is audited)."""


@dlq.command("list")
@click.option("--task-type", default=None, help="Only this task type.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@dsn_option
@json_option
def dlq_list(task_type: str | None, limit: int, dsn: str | None, as_json: bool) -> None:
    """List dead letters, newest first."""
    rows = dlq_ops.list_dead(resolve_dsn(dsn), task_type=task_type, limit=limit)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no dead letters")
        return
    table = Table(title="dead letters", title_justify="left")
    for col in ("id", "task type", "queue", "biz id", "retries", "dead since", "last error"):
        table.add_column(col)
    for r in rows:
        error = (r["last_error"] or "").splitlines()
        table.add_row(
            str(r["id"]),
            r["task_type"],
            r["queue"],
            r["biz_id"] or "",
            f"{r['retry_count']}/{r['max_retry_count']}",
            str(r["finished_at"])[:19] if r["finished_at"] else "",
            error[0][:80] if error else "",
        )
    out.print(table)


@dlq.command("show")
@click.argument("task_id", type=int)
@dsn_option
@json_option
def dlq_show(task_id: int, dsn: str | None, as_json: bool) -> None:
    """Show one task in full: payload, last error with traceback, audit history."""
    row, audit = dlq_ops.show(resolve_dsn(dsn), task_id)
    if as_json:
        print_json({"task": row, "audit": audit})
        return
    render_task(row, audit)


def render_task(row: dict[str, Any], audit: list[dict[str, Any]]) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in row.items():
        if key in ("payload", "progress", "last_error", "context"):
            continue
        table.add_row(key, "" if value is None else str(value))
    out.print(table)
    out.print("[bold]payload[/bold]")
    out.print(json.dumps(row["payload"], indent=2), markup=False)
    for key in ("progress", "context"):
        if row.get(key) is not None:
            out.print(f"{key}: {json.dumps(row[key])}", markup=False)
    if row.get("last_error"):
        out.print("[bold]last error[/bold]")
        out.print(row["last_error"], markup=False)
    if audit:
        out.print("[bold]audit[/bold]")
        for a in audit:
            note = f" — {a['note']}" if a["note"] else ""
            out.print(f"  {a['at']}  {a['action']} by {a['actor']}{note}", markup=False)


def _selection(ids: tuple[int, ...], task_type: str | None, everything: bool) -> dlq_ops.Selection:
    return dlq_ops.Selection(ids=ids or None, task_type=task_type, everything=everything)


def _selection_options(fn: F) -> F:
    fn = click.argument("ids", nargs=-1, type=int)(fn)
    fn = click.option("--task-type", default=None, help="Every dead letter of this type.")(fn)
    fn = click.option("--all", "everything", is_flag=True, help="Every dead letter.")(fn)
    fn = click.option("--note", default=None, help="Why (stored in the audit table).")(fn)
    fn = click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")(fn)
    return fn


@dlq.command("requeue")
@_selection_options
@click.option(
    "--reset-retries", is_flag=True, help="Start over with the full retry budget (retry_count=0)."
)
@dsn_option
@json_option
def dlq_requeue(
    ids: tuple[int, ...],
    task_type: str | None,
    everything: bool,
    note: str | None,
    dry_run: bool,
    reset_retries: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Move dead letters back to PENDING: IDs, or --task-type T, or --all."""
    selection = _selection(ids, task_type, everything)
    target = resolve_dsn(dsn)
    if dry_run:
        rows = dlq_ops.preview(target, selection)
        _report("would requeue", [int(r["id"]) for r in rows], as_json, dry_run=True)
        return
    moved = dlq_ops.requeue(target, selection, reset_retries=reset_retries, note=note)
    _report("requeued", moved, as_json)


@dlq.command("discard")
@_selection_options
@dsn_option
@json_option
def dlq_discard(
    ids: tuple[int, ...],
    task_type: str | None,
    everything: bool,
    note: str | None,
    dry_run: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Delete dead letters for good (the audit table keeps a copy): IDs, --task-type, --all."""
    selection = _selection(ids, task_type, everything)
    target = resolve_dsn(dsn)
    if dry_run:
        rows = dlq_ops.preview(target, selection)
        _report("would discard", [int(r["id"]) for r in rows], as_json, dry_run=True)
        return
    gone = dlq_ops.discard(target, selection, note=note)
    _report("discarded", gone, as_json)


def _report(verb: str, ids: list[int], as_json: bool, *, dry_run: bool = False) -> None:
    if as_json:
        print_json({"dry_run": dry_run, "ids": ids, "count": len(ids)})
        return
    shown = ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else "")
    click.echo(f"{verb} {len(ids)} task(s)" + (f": {shown}" if ids else ""))


# --- demo ----------------------------------------------------------------------------------


@cli.command()
@dsn_option
@click.option(
    "--seconds",
    type=click.FloatRange(min=5),
    default=50,
    show_default=True,
    help="Give up after this long.",
)
def demo(dsn: str | None, seconds: float) -> None:
    """A self-contained tour on the embedded database (or --dsn): enqueue, run, retry,
    dead-letter, stats."""
    from taskq import demo as demo_mod

    code = demo_mod.run(dsn, budget_seconds=seconds, console=out)
    if code:
        sys.exit(code)


# --- entry point ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps every expected failure to one line and an exit code."""
    try:
        rv = cli.main(args=argv, prog_name="taskq", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("taskq: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except TaskqError as exc:
        click.echo(f"taskq: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        click.echo(f"taskq: error: {DatabaseUnavailable(first_line(exc))}", err=True)
        sys.exit(DatabaseUnavailable.exit_code)
    except psycopg.Error as exc:
        click.echo(f"taskq: error: database refused: {first_line(exc)}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


# The operations commands (stats, plan, pause, resume, circuit, watch, prune) live in their
# own module; importing it registers them on the group.
from taskq import cli_dashboard, cli_ops  # noqa: E402, F401

if __name__ == "__main__":
    # Run through the imported module, on which cli_ops registered its commands.
    from taskq.cli import main as _main

    _main()
