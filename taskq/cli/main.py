"""The ``taskq`` command. Thin on purpose: parse, call one domain function, render, exit.

Exit codes: 0 success; 1 bad input or a refused operation; 2 usage error (click); 3 the
database is unavailable. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import faulthandler
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import psycopg
from rich.console import Console
from rich.table import Table
from rich.text import Text

from taskq import logs
from taskq import settings as settings_mod
from taskq.app import App, load_app
from taskq.db.connection import first_line, missing_schema
from taskq.db.dsn import resolve_dsn
from taskq.errors import (
    ConfigError,
    DatabaseUnavailable,
    SchemaMissing,
    TaskqError,
    UnknownTaskType,
)
from taskq.model import DeadLetterFilter, DeadLetterState
from taskq.ops import dlq as dlq_ops
from taskq.ops import tasks as tasks_ops
from taskq.ops.formatting import age, payload_text, plain, safe
from taskq.settings import ProtectionSettings, WorkerSettings, default
from taskq.worker import eventloop, gctuning
from taskq.worker.memory import parse_size
from taskq.worker.worker import Worker, parse_queues

F = TypeVar("F", bound=Callable[..., Any])

# On a terminal rich fits the window; in a pipe (scripts, logs) never cut names short.
# A terminal's own width; piped or captured output is 120 columns wide.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)


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


Row = dict[str, Any]
Column = tuple[str, Callable[[Row], str]]
"""A table column: its header and how to render one row's cell (rich markup allowed: escape
what a producer wrote)."""


def emit(
    rows: Sequence[Row],
    columns: Sequence[Column],
    as_json: bool,
    *,
    title: str,
    empty: str,
    json_value: Any = None,
    keep: Sequence[str] = (),
) -> None:
    """The one way a command prints rows: JSON for scripts (``json_value``, default the rows),
    else a table titled ``title``, or ``empty`` when there are none. The columns named in
    ``keep`` (names people grep for) are never wrapped: the other columns give way when the
    table is wider than the output."""
    if as_json:
        print_json(list(rows) if json_value is None else json_value)
        return
    if not rows:
        out.print(empty)
        return
    cells = [[cell(row) for _, cell in columns] for row in rows]
    table = Table(title=title, title_justify="left")
    for i, (header, _) in enumerate(columns):
        if header in keep:
            widest = max(len(header), *(_shown_width(r[i]) for r in cells))
            table.add_column(header, no_wrap=True, min_width=min(widest, 60))
        else:
            table.add_column(header)
    for r in cells:
        table.add_row(*r)
    out.print(table)


def _shown_width(cell: str) -> int:
    try:
        return Text.from_markup(cell).cell_len
    except Exception:  # not markup after all: its raw length
        return len(cell)


def when(value: Any) -> str:
    """A timestamp to the second, or '-'."""
    return str(value)[:19] if value else "-"


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
    from taskq.db import migrate as migrations  # alembic is slow to import; only load it here

    if as_sql:
        click.echo(migrations.sql_script(revision))
        if with_roles:
            click.echo(migrations.roles_sql_script())
        return
    target = resolve_dsn(dsn, migrate_embedded=False)
    click.echo(migrations.describe(*migrations.upgrade(target, revision)))
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
    default=default(WorkerSettings, "poll_interval_seconds"),
    show_default=True,
    help="Seconds between fallback polls (NOTIFY wakes workers sooner).",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0),
    default=default(WorkerSettings, "shutdown_timeout_seconds"),
    show_default=True,
    help="On SIGTERM, seconds to let in-flight tasks finish before giving them back. Keep it "
    "below systemd's TimeoutStopSec.",
)
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(min=0.05),
    default=default(WorkerSettings, "heartbeat_interval_seconds"),
    show_default=True,
    help="Seconds between heartbeats. The lease is 3 heartbeats: a dead worker's tasks are "
    "rescued that long after it stopped.",
)
@click.option(
    "--reaper-interval",
    type=click.FloatRange(min=0.05),
    default=default(WorkerSettings, "reaper_interval_seconds"),
    show_default=True,
    help="Seconds between reaper passes (one pass at a time across all workers).",
)
@click.option(
    "--timeout-grace",
    type=click.FloatRange(min=0),
    default=default(WorkerSettings, "timeout_grace_seconds"),
    show_default=True,
    help="The reaper rescues an attempt this many seconds after its timeout.",
)
@click.option(
    "--max-memory",
    default=None,
    help="Stop claiming while resident memory is above this (e.g. 512M, 2G).",
)
@click.option(
    "--memory-grace",
    type=click.FloatRange(min=0),
    default=default(WorkerSettings, "memory_grace_seconds"),
    show_default=True,
    help="Over --max-memory with nothing in flight this many seconds: exit 75 to be restarted.",
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
    default=default(WorkerSettings, "metrics_host"),
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
    type=click.IntRange(min=0),
    default=default(ProtectionSettings, "breaker_threshold"),
    show_default=True,
    help="Consecutive failures of a task type that open its circuit breaker; 0 turns "
    "breakers off (no trips, by count or by failure rate).",
)
@click.option(
    "--breaker-cooldown",
    type=click.FloatRange(min=0),
    default=default(ProtectionSettings, "breaker_cooldown_seconds"),
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
    "--event-loop",
    type=click.Choice(eventloop.CHOICES),
    default=settings_mod.EVENT_LOOP,
    show_default=True,
    envvar="TASKQ_EVENT_LOOP",
    help="auto: uvloop when it is installed (pip install 'taskq[speed]'), else asyncio's. "
    "Default: $TASKQ_EVENT_LOOP, else auto.",
)
@click.option(
    "--log-format",
    type=click.Choice(["auto", "json", "console"]),
    default=settings_mod.LOG_FORMAT,
    show_default=True,
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=settings_mod.LOG_LEVEL,
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
    memory_grace: float,
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
    event_loop: eventloop.EventLoop,
    log_format: str,
    log_level: str,
) -> None:
    """Run a worker process: claim tasks, run their handlers, record the outcome.

    SIGTERM or SIGINT drains gracefully; a second signal gives in-flight tasks back at once.
    """
    logs.configure(log_format, log_level)  # type: ignore[arg-type]
    gctuning.before_app_import()
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
        memory_grace_seconds=memory_grace,
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
    factory = eventloop.loop_factory(event_loop)  # refused here, before any child starts
    target = resolve_dsn(dsn or app.dsn)
    if count > 1:
        from taskq.worker.supervisor import Supervisor, child_argv

        argv = child_argv(sys.argv[1:])
        if not dsn:
            argv += ["--dsn", target]  # resolved once: the children share one database
        sys.exit(Supervisor(argv, count, drain_seconds=shutdown_timeout).run())
    index = int(os.environ.get("TASKQ_WORKER_INDEX", "0"))
    if settings.metrics_port and index:
        settings = dataclasses.replace(settings, metrics_port=settings.metrics_port + index)
    w = Worker(app, dsn=target, settings=settings)
    gctuning.after_app_import()
    eventloop.run(_serve(w), factory)
    if w.threads_busy():
        # A sync handler is still running in a thread we cannot kill (a forced stop, or an
        # overrun). Its row was not given back (it would run twice at once): exit now, without
        # letting the interpreter wait for the thread; the reaper rescues the row.
        sys.stderr.flush()
        os._exit(w.exit_code)
    if w.exit_code:
        sys.exit(w.exit_code)  # 75: memory never came back; the supervisor restarts us


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
    from taskq.ops.stats import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


async def _serve(w: Worker) -> None:
    from taskq.worker import stacks

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, w.request_stop)
    loop.add_signal_handler(signal.SIGUSR1, stacks.dump)
    await w.run()


# --- reap and workers ----------------------------------------------------------------------


@cli.command()
@dsn_option
@click.option(
    "--timeout-grace",
    type=click.FloatRange(min=0),
    default=default(WorkerSettings, "timeout_grace_seconds"),
    show_default=True,
    help="Rescue attempts this many seconds past their timeout.",
)
@click.option(
    "--orphan-after",
    type=click.FloatRange(min=0),
    default=settings_mod.REAP_ORPHAN_AFTER_SECONDS,
    show_default=True,
    help="Rescue attempts whose worker row is missing once they are this old.",
)
@json_option
def reap(dsn: str | None, timeout_grace: float, orphan_after: float, as_json: bool) -> None:
    """One reaper pass now: rescue attempts of dead workers and attempts past their timeout."""
    result = tasks_ops.reap(
        resolve_dsn(dsn), grace_seconds=timeout_grace, orphan_after_seconds=orphan_after
    )
    if as_json:
        print_json({"rescued": result.rescued, "forgotten_workers": result.forgotten_workers})
        return
    for row in result.rescued:
        out.print(
            plain(f"{row['id']}  {row['task_type']}  -> {row['status']}  ({row['last_error']})"),
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
    emit(
        tasks_ops.list_workers(resolve_dsn(dsn)),
        WORKER_COLUMNS,
        as_json,
        title="workers",
        empty="no workers",
        keep=("id",),
    )


WORKER_COLUMNS: list[Column] = [
    ("id", lambda r: safe(r["id"])),
    ("host", lambda r: safe(r["host"])),
    ("pid", lambda r: str(r["pid"])),
    ("queues", lambda r: safe(json.dumps(r["queues"]))),
    ("version", lambda r: safe(r["version"])),
    ("started", lambda r: str(r["started_at"])[:19]),
    ("last beat", lambda r: f"{age(r['silent_seconds'])} ago"),
    ("state", lambda r: "[green]alive[/green]" if r["alive"] else "[red]lease expired[/red]"),
]


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
    from taskq.ops import health as health_ops

    found = health_ops.check(
        resolve_dsn(dsn), worker_id=worker_id, pid=pid, max_silence_seconds=max_silence
    )
    click.echo(
        f"ok: worker {plain(found.worker_id)} (pid {found.pid} on {plain(found.host)}) heart-beat "
        f"{found.silent_seconds:.1f}s ago"
    )


# --- enqueue -------------------------------------------------------------------------------


@cli.command()
@click.argument("task_type")
@click.option("--payload", default="{}", show_default=True, help="The payload, as JSON.")
@click.option("--biz-id", default=None, help="Business key (order number, user id...).")
@click.option("--priority", type=int, default=None, help="Larger runs first (default 0).")
@click.option(
    "--queue",
    default=None,
    help="Queue name (default: the type's registered queue, else 'default').",
)
@click.option("--delay", type=click.FloatRange(min=0), default=None, help="Seconds from now.")
@click.option(
    "--app",
    "app_spec",
    default=None,
    help="Check TASK_TYPE against this App (module:attribute) and use its registered queue, "
    "priority, retries and timeout; an unregistered type is refused.",
)
@dsn_option
@json_option
def enqueue(
    task_type: str,
    payload: str,
    biz_id: str | None,
    priority: int | None,
    queue: str | None,
    delay: float | None,
    app_spec: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Put one task on the queue and print its id."""
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not valid JSON: {exc}") from None
    app = load_app(app_spec) if app_spec else App()
    if app_spec and task_type not in app.tasks:
        known = ", ".join(sorted(app.tasks)) or "none"
        raise UnknownTaskType(
            f"{app_spec} registers no task type {task_type!r} (registered: {known})"
        )
    task_id = tasks_ops.enqueue(
        resolve_dsn(dsn or app.dsn),
        app,
        task_type,
        value,
        biz_id=biz_id,
        priority=priority,
        queue=queue,
        delay=delay,
    )
    if as_json:
        print_json({"id": task_id})
    else:
        click.echo(task_id)


# --- show, schedules, reconcile -------------------------------------------------------------


@cli.command()
@click.argument("task_id", type=int)
@click.option("--full", is_flag=True, help="Print the whole payload, however big.")
@dsn_option
@json_option
def show(task_id: int, full: bool, dsn: str | None, as_json: bool) -> None:
    """One task in full, with the tree of tasks it enqueued (child tasks)."""
    row, audit, tree = tasks_ops.show(resolve_dsn(dsn), task_id)
    if as_json:
        print_json({"task": row, "audit": audit, "tree": tree})
        return
    render_task(row, audit, full=full)
    if len(tree) > 1:
        out.print("[bold]children[/bold]")
        for node in tree[1:]:
            indent = "  " * node["depth"]
            out.print(
                plain(
                    f"{indent}└ {node['id']}  {node['task_type']}  {node['status']}"
                    f"  biz_id={node['biz_id'] or '-'}"
                ),
                markup=False,
            )


@cli.command()
@dsn_option
@json_option
def schedules(dsn: str | None, as_json: bool) -> None:
    """Periodic schedules with their last and next runs and missed ticks."""
    emit(
        tasks_ops.list_schedules(resolve_dsn(dsn)),
        SCHEDULE_COLUMNS,
        as_json,
        title="schedules",
        empty="no schedules (they appear once a worker with @app.periodic has started)",
        keep=("name", "task type"),
    )


SCHEDULE_COLUMNS: list[Column] = [
    ("name", lambda r: safe(r["name"])),
    ("task type", lambda r: safe(r["task_type"])),
    ("spec", lambda r: safe(r["spec"])),
    ("tz", lambda r: safe(r["timezone"])),
    ("catch-up", lambda r: safe(r["catch_up"])),
    ("last tick", lambda r: when(r["last_tick"])),
    (
        "last task",
        lambda r: f"{r['last_task_id']} {r['last_status'] or ''}" if r["last_task_id"] else "-",
    ),
    ("next tick", lambda r: when(r["next_tick"])),
    ("missed", lambda r: f"[red]{r['missed_total']}[/red]" if r["missed_total"] else "0"),
]


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
    from taskq.ops import reconcile as reconciling

    app = load_app(app_spec)
    names = [name] if name else sorted(app.reconcilers)
    if not names:
        raise ConfigError(f"{app_spec} registers no reconcilers")
    reports = reconciling.run_all(app, names, resolve_dsn(dsn or app.dsn), dry_run=dry_run)
    if as_json:
        print_json([r.as_dict() for r in reports])
        return
    for r in reports:
        verb = "would enqueue" if dry_run else "enqueued"
        count = len(r.missing) if dry_run else len(r.enqueued)
        shown = ", ".join(r.missing[:10]) + (" ..." if len(r.missing) > 10 else "")
        click.echo(
            plain(
                f"{r.name}: {r.candidates} key(s) should have a {r.task_type} task; "
                f"{len(r.missing)} missing; {verb} {count}" + (f" ({shown})" if r.missing else "")
            )
        )


# --- stats ---------------------------------------------------------------------------------


# --- dlq -----------------------------------------------------------------------------------


@cli.group()
def dlq() -> None:
    """Operate dead letters: list, show, groups, assign, resolve, requeue, discard, report
    (every action is audited)."""


def _filter_options(fn: F) -> F:
    """The dead-letter filters shared by list, groups, requeue, discard, assign and resolve."""
    fn = click.option(
        "--state",
        type=click.Choice([s.value for s in DeadLetterState]),
        default=None,
        help="Handling state: new (nobody looked yet), investigating, resolved.",
    )(fn)
    fn = click.option("--group", default=None, help="Error group (fingerprint, `dlq groups`).")(fn)
    fn = click.option("--newer-than", default=None, help="Dead-lettered within this (e.g. 2h).")(fn)
    fn = click.option("--older-than", default=None, help="Dead-lettered before this (e.g. 1d).")(fn)
    fn = click.option("--error", default=None, help="Last error contains this text.")(fn)
    fn = click.option("--biz-id", default=None, help="Only this business key.")(fn)
    return fn


def _filter(
    biz_id: str | None,
    error: str | None,
    older_than: str | None,
    newer_than: str | None,
    group: str | None,
    state: str | None,
    task_type: str | None = None,
) -> DeadLetterFilter:
    return DeadLetterFilter(
        task_type=task_type,
        biz_id=biz_id,
        error=error,
        older_than_seconds=_duration("--older-than", older_than),
        newer_than_seconds=_duration("--newer-than", newer_than),
        fingerprint=group,
        state=DeadLetterState(state) if state is not None else None,
    )


@dlq.command("list")
@click.option("--task-type", default=None, help="Only this task type.")
@_filter_options
@click.option(
    "--limit", type=click.IntRange(min=1), default=settings_mod.DLQ_LIST_LIMIT, show_default=True
)
@dsn_option
@json_option
def dlq_list(
    task_type: str | None,
    biz_id: str | None,
    error: str | None,
    older_than: str | None,
    newer_than: str | None,
    group: str | None,
    state: str | None,
    limit: int,
    dsn: str | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first (`--state new`: what still needs a person)."""
    where = _filter(biz_id, error, older_than, newer_than, group, state, task_type)
    rows = dlq_ops.list_dead(resolve_dsn(dsn), limit=limit, where=where)
    matching = int(rows[0]["matching"]) if rows else 0
    emit(
        rows,
        DEAD_LETTER_COLUMNS,
        as_json,
        title="dead letters" + (f" ({len(rows)} of {matching})" if matching > len(rows) else ""),
        empty="no dead letters",
        keep=("task type",),
    )


def _first_line(text: str | None) -> str:
    lines = (text or "").splitlines()
    return lines[0][:80] if lines else ""


def _handling(r: Row) -> str:
    text = str(r["state"]) + (f" ({r['owner']})" if r["owner"] else "")
    return text + (f": {r['resolution']}" if r["resolution"] else "")


DEAD_LETTER_COLUMNS: list[Column] = [
    ("id", lambda r: str(r["id"])),
    ("task type", lambda r: safe(r["task_type"])),
    ("queue", lambda r: safe(r["queue"])),
    ("biz id", lambda r: safe(r["biz_id"] or "")),
    ("retries", lambda r: f"{r['retry_count']}/{r['max_retry_count']}"),
    ("dead since", lambda r: str(r["finished_at"])[:19] if r["finished_at"] else ""),
    ("group", lambda r: str(r["fingerprint"])),
    ("state", lambda r: safe(_handling(r))),
    ("last error", lambda r: safe(_first_line(r["last_error"]))),
]


@dlq.command("show")
@click.argument("task_id", type=int)
@click.option("--full", is_flag=True, help="Print the whole payload, however big.")
@dsn_option
@json_option
def dlq_show(task_id: int, full: bool, dsn: str | None, as_json: bool) -> None:
    """Show one task in full: payload, last error with traceback, audit history."""
    row, audit = dlq_ops.show(resolve_dsn(dsn), task_id)
    if as_json:
        print_json({"task": row, "audit": audit})
        return
    render_task(row, audit, full=full)


def render_task(row: dict[str, Any], audit: list[dict[str, Any]], *, full: bool = False) -> None:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in row.items():
        if key in ("payload", "progress", "last_error", "context"):
            continue
        table.add_row(key, safe("" if value is None else value))
    out.print(table)
    out.print("[bold]payload[/bold]")
    # Not through rich: wrapping megabytes of text is what made `show` of a big payload slow.
    click.echo(payload_text(row["payload"], full=full))
    for key in ("progress", "context"):
        if row.get(key) is not None:
            click.echo(f"{key}: {payload_text(row[key], full=full)}")
    if row.get("last_error"):
        # A task that failed and then succeeded keeps its last error: say whose it was.
        earlier = row.get("status") not in ("FAILED", "DEAD_LETTER")
        title = "last error (of an earlier attempt)" if earlier else "last error"
        if row.get("status") == "FAILED" and row.get("next_retry_time"):
            title += f" — retry due at {row['next_retry_time']}"
        out.print(f"[bold]{title}[/bold]")
        click.echo(plain(row["last_error"], multiline=True))
    if audit:
        out.print("[bold]audit[/bold]")
        for a in audit:
            note = f" — {a['note']}" if a["note"] else ""
            # The actor is the database login; the name a tool acted for is in detail.by.
            acted_for = (a.get("detail") or {}).get("by")
            who = f"{a['actor']} for {acted_for}" if acted_for else a["actor"]
            click.echo(plain(f"  {a['at']}  {a['action']} by {who}{note}"))


def _selection(
    ids: tuple[int, ...], task_type: str | None, everything: bool, where: DeadLetterFilter
) -> dlq_ops.Selection:
    return dlq_ops.Selection(
        ids=ids or None, task_type=task_type, everything=everything, where=where
    )


def _selection_options(fn: F) -> F:
    fn = click.argument("ids", nargs=-1, type=int)(fn)
    fn = click.option("--task-type", default=None, help="Every dead letter of this type.")(fn)
    fn = click.option("--all", "everything", is_flag=True, help="Every dead letter.")(fn)
    fn = _filter_options(fn)
    fn = click.option("--note", default=None, help="Why (stored in the audit table).")(fn)
    fn = click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")(fn)
    return fn


@dlq.command("requeue")
@_selection_options
@click.option(
    "--reset-retries", is_flag=True, help="Start over with the full retry budget (retry_count=0)."
)
@click.option(
    "--rate",
    default=None,
    help="Replay at most this fast (e.g. 50/s, 600/min), with a progress bar. Ctrl-C stops it: "
    "the rest stays dead, and the audit says how many went.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=dlq_ops.MAX_BATCH),
    default=None,
    help=f"Tasks per statement (default and most: {dlq_ops.MAX_BATCH}).",
)
@dsn_option
@json_option
def dlq_requeue(
    ids: tuple[int, ...],
    task_type: str | None,
    everything: bool,
    biz_id: str | None,
    error: str | None,
    older_than: str | None,
    newer_than: str | None,
    group: str | None,
    state: str | None,
    note: str | None,
    dry_run: bool,
    reset_retries: bool,
    rate: str | None,
    batch: int | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Move dead letters back to PENDING: IDs, --task-type T, filters, or --all. Each one's
    handling record is resolved as requeued."""
    where = _filter(biz_id, error, older_than, newer_than, group, state)
    selection = _selection(ids, task_type, everything, where)
    per_second = dlq_ops.parse_rate(rate) if rate is not None else None
    target = resolve_dsn(dsn)
    if dry_run:
        would = dlq_ops.requeue(target, selection, reset_retries=reset_retries, dry_run=True)
        _report("would requeue", would, as_json, dry_run=True)
        return
    if per_second is None:
        run = dlq_ops.replay(target, selection, reset_retries=reset_retries, note=note, batch=batch)
    else:
        run = _replay_with_progress(target, selection, reset_retries, note, batch, per_second)
    if run.interrupted:
        click.echo(
            f"taskq: interrupted: requeued {len(run.done)} of {run.planned} task(s); "
            "the rest are still dead letters (recorded in the audit table)",
            err=True,
        )
        sys.exit(130)
    _report("requeued", run.done, as_json)


def _replay_with_progress(
    dsn: str,
    selection: dlq_ops.Selection,
    reset_retries: bool,
    note: str | None,
    batch: int | None,
    per_second: float,
) -> dlq_ops.Run:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    errors = Console(stderr=True, highlight=False)
    with Progress(
        "requeue",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=errors,
        transient=not errors.is_terminal,
    ) as bar:
        job = bar.add_task("requeue", total=None)

        def progress(done: int, planned: int) -> None:
            bar.update(job, completed=done, total=planned)

        return dlq_ops.replay(
            dsn,
            selection,
            reset_retries=reset_retries,
            note=note,
            batch=batch,
            rate=per_second,
            progress=progress,
        )


@dlq.command("discard")
@_selection_options
@dsn_option
@json_option
def dlq_discard(
    ids: tuple[int, ...],
    task_type: str | None,
    everything: bool,
    biz_id: str | None,
    error: str | None,
    older_than: str | None,
    newer_than: str | None,
    group: str | None,
    state: str | None,
    note: str | None,
    dry_run: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Delete dead letters for good (the audit table keeps a copy): IDs, --task-type, filters,
    --all."""
    where = _filter(biz_id, error, older_than, newer_than, group, state)
    selection = _selection(ids, task_type, everything, where)
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
    from taskq.cli import demo as demo_mod

    code = demo_mod.run(dsn, budget_seconds=seconds, console=out)
    if code:
        sys.exit(code)


# --- entry point ---------------------------------------------------------------------------


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps every expected failure to one line and an exit code.

    SIGTERM and SIGHUP become a normal exit (code 128 + signal), so exit hooks run: the embedded
    server counts its clients and stops after the last one. The worker and the dashboard install
    their own graceful handlers over these."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _exit_on_signal)
    # `kill -USR1` prints every thread's stack to stderr (a command that seems stuck); the
    # worker replaces it with a log event that also shows its asyncio tasks.
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # needs a real stderr
    try:
        rv = cli.main(args=argv, prog_name="taskq", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("taskq: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except TaskqError as exc:
        click.echo(f"taskq: error: {plain(exc)}", err=True)
        sys.exit(exc.exit_code)
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        click.echo(f"taskq: error: {DatabaseUnavailable(first_line(exc))}", err=True)
        sys.exit(DatabaseUnavailable.exit_code)
    except psycopg.errors.ReadOnlySqlTransaction:
        click.echo(
            "taskq: error: the server is read-only (a hot standby): this command writes; "
            "point --dsn at the primary (or list every host with target_session_attrs=read-write)",
            err=True,
        )
        sys.exit(1)
    except psycopg.Error as exc:
        if missing_schema(exc):
            click.echo(f"taskq: error: {plain(SchemaMissing(first_line(exc)))}", err=True)
        else:
            click.echo(f"taskq: error: database refused: {plain(first_line(exc))}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
