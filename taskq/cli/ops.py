"""The operator's commands: stats, plan, pause/resume, circuit, watch, prune. Thin like the rest
of the CLI: parse, call one domain function, render, exit."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from taskq.cli.main import Column, cli, dsn_option, emit, json_option, out, print_json, when
from taskq.control.state import Level
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError, TaskqError
from taskq.model import parse_rate
from taskq.ops import stats as stats_ops
from taskq.ops import switches
from taskq.ops.formatting import age, plain, render_report, safe

# --- stats ---------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--minutes",
    type=click.IntRange(min=1),
    default=15,
    show_default=True,
    help="The window for throughput, rates and latencies.",
)
@click.option(
    "--wide", is_flag=True, help="All columns (scheduled, retry wait, p95, retries), past 120."
)
@dsn_option
@json_option
def stats(minutes: int, wide: bool, dsn: str | None, as_json: bool) -> None:
    """Backlog, throughput, failure rates, latency percentiles, retries, dead letters, running vs
    capacity, pauses and protection — per queue and task type.

    \b
    Columns: runnable = can run now; oldest = its wait; sched. = due later;
    retry wait = failed, waiting for its retry; /min = finished per minute;
    ok / fail = share of ATTEMPTS in the window; dispatch = runnable -> started;
    run = started -> finished; retries 2:5 = 5 tasks finished after 2 retries;
    DLQ (+new) = dead letters (new in the window). Fits 120 columns; --wide shows all."""
    report = stats_ops.report(resolve_dsn(dsn), minutes)
    if as_json:
        print_json(report.as_dict())
        return
    render_report(report, Console(highlight=False, width=250) if wide else out, wide=wide)


# --- plan ----------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--tasks", type=click.IntRange(min=1), required=True, help="How many tasks must finish..."
)
@click.option("--within", required=True, help="...within this long (e.g. 48h, 7d).")
@click.option("--task-type", default=None, help="Measure this task type's run time.")
@click.option(
    "--duration",
    default=None,
    help="Mean run time of one task (e.g. 29m), instead of measuring it.",
)
@click.option(
    "--observed",
    type=click.IntRange(min=1),
    default=None,
    help="Derive the run time from what was done: this many tasks...",
)
@click.option("--over", default=None, help="...over this long...")
@click.option(
    "--at-concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="...with this many running at once.",
)
@click.option(
    "--history", default="7d", show_default=True, help="How far back to measure run times."
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Spread the slots over this many worker processes.",
)
@click.option("--cpu-bound", is_flag=True, help="One process per core instead of one pool.")
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    default=None,
    help="Plan with this running cap (default: the --task-type's, from `taskq limits`).",
)
@click.option("--rate", default=None, help="Plan with this rate, e.g. 20/s (default: the type's).")
@dsn_option
@json_option
def plan(
    tasks: int,
    within: str,
    task_type: str | None,
    duration: str | None,
    observed: int | None,
    over: str | None,
    at_concurrency: int | None,
    history: str,
    processes: int | None,
    cpu_bound: bool,
    max_running: int | None,
    rate: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Size workers with Little's law: concurrency = throughput x mean run time. A type's flow
    limits (its running cap, its rate) bound what more slots can do: the plan says so."""
    window = _seconds("--within", within)
    if observed is not None or over is not None or at_concurrency is not None:
        if observed is None or over is None or at_concurrency is None:
            raise ConfigError("--observed, --over and --at-concurrency go together")
        mean = at_concurrency * _seconds("--over", over) / observed
        source = f"derived: {observed} tasks in {over} at concurrency {at_concurrency}"
    elif duration is not None:
        mean = _seconds("--duration", duration)
        source = "given: --duration"
    else:
        mean, source = stats_ops.measured_mean(
            resolve_dsn(dsn), task_type=task_type, history_seconds=_seconds("--history", history)
        )
    rate_per_second = parse_rate(rate) if rate is not None else None
    if task_type is not None and (max_running is None or rate_per_second is None):
        cap_set, rate_set = stats_ops.type_limits(resolve_dsn(dsn), task_type)
        max_running = max_running if max_running is not None else cap_set
        rate_per_second = rate_per_second if rate_per_second is not None else rate_set
    result = stats_ops.plan(
        tasks=tasks,
        within_seconds=window,
        mean_seconds=mean,
        source=source,
        task_type=task_type,
        processes=processes,
        cpu_bound=cpu_bound,
        max_running=max_running,
        rate_per_second=rate_per_second,
    )
    if as_json:
        print_json(result.as_dict())
        return
    queue = "QUEUE"
    out.print(f"mean run time: {age(result.mean_seconds)} ({result.source})")
    out.print(
        f"needed throughput: {tasks} tasks / {within} = "
        f"{result.throughput_per_second * 3600:.2f} tasks/hour"
    )
    out.print(
        f"Little's law: concurrency = throughput x mean run time = "
        f"{result.concurrency_exact:.2f} -> [bold]{result.slots} slot(s)[/bold]"
    )
    out.print(
        f"layout: {result.processes} process(es) x {result.slots_per_process} slot(s): "
        f"taskq worker --queues {queue}={result.slots_per_process}"
        + (f"  (run {result.processes} of them)" if result.processes > 1 else "")
    )
    for warning in result.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")


def _seconds(option: str, text: str) -> float:
    try:
        return stats_ops.parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


# --- pause / resume ------------------------------------------------------------------------


def _target(name: str | None, queue: str | None) -> tuple[switches.Kind, str]:
    if (name is None) == (queue is None):
        raise ConfigError("give a TASK_TYPE or --queue Q (one of them)")
    return ("queue", queue) if queue is not None else ("task_type", name)  # type: ignore[return-value]


def _switch(
    action: str, task_type: str | None, queue: str | None, note: str | None, dsn: str | None
) -> None:
    kind, name = _target(task_type, queue)
    flip = switches.pause if action == "pause" else switches.resume
    changed = flip(resolve_dsn(dsn), kind=kind, name=name, note=note)
    what = f"{kind.replace('_', ' ')} {name}"
    done = "paused" if action == "pause" else "resumed"
    already = "was already paused" if action == "pause" else "was not paused"
    click.echo(f"{done} {what}" if changed else f"{what} {already}")


@cli.command()
@click.argument("task_type", required=False)
@click.option("--queue", default=None, help="Pause a whole queue instead of one task type.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def pause(task_type: str | None, queue: str | None, note: str | None, dsn: str | None) -> None:
    """Stop consuming a task type (or --queue): its backlog waits, nothing fails or is lost."""
    _switch("pause", task_type, queue, note, dsn)


@cli.command()
@click.argument("task_type", required=False)
@click.option("--queue", default=None, help="Resume a whole queue.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def resume(task_type: str | None, queue: str | None, note: str | None, dsn: str | None) -> None:
    """Consume a paused task type (or --queue) again; its backlog drains."""
    _switch("resume", task_type, queue, note, dsn)


# --- circuit -------------------------------------------------------------------------------


@cli.group()
def circuit() -> None:
    """The adaptive protection level (L0-L4) and the per-type circuit breakers."""


@circuit.command("status")
@dsn_option
@json_option
def circuit_status(dsn: str | None, as_json: bool) -> None:
    """The protection level, why, and every breaker that has tripped."""
    status = switches.circuit_status(resolve_dsn(dsn))
    if as_json:
        print_json(status)
        return
    out.print(
        f"level: L{status['level']} {status['level_name']}"
        f" (since {str(status['changed_at'])[:19]}, by {safe(status['changed_by'])})"
    )
    if status["reason"]:
        out.print(f"reason: {plain(status['reason'])}", markup=False)
    emit(
        status["breakers"],
        BREAKER_COLUMNS,
        False,
        title="breakers",
        empty="breakers: none has tripped",
        keep=("task type",),
    )


BREAKER_COLUMNS: list[Column] = [
    ("task type", lambda b: safe(b["task_type"])),
    ("state", lambda b: b["state"]),
    ("consecutive failures", lambda b: str(b["consecutive_failures"])),
    ("opened", lambda b: when(b["opened_at"])),
    ("reason", lambda b: safe(b["reason"] or "")),
]


@circuit.command("reset")
@click.option("--task-type", default=None, help="Close only this type's breaker.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def circuit_reset(task_type: str | None, note: str | None, dsn: str | None) -> None:
    """Close the breakers and bring the level back to L0 (the only way out of L4)."""
    result = switches.circuit_reset(resolve_dsn(dsn), task_type=task_type, note=note)
    closed = plain(", ".join(result["closed_breakers"]) or "none")
    click.echo(
        f"closed breakers: {closed}" + ("; level reset to L0" if result["level_reset"] else "")
    )


@circuit.command("level")
@click.argument("level", type=click.IntRange(min=0, max=4))
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def circuit_level(level: int, note: str | None, dsn: str | None) -> None:
    """Set the protection level by hand (e.g. 4 to stop all dispatch during an incident)."""
    changed = switches.set_level(resolve_dsn(dsn), level, note=note)
    click.echo(
        f"level set to L{level} {Level(level).name}" if changed else f"level already L{level}"
    )


# --- watch ---------------------------------------------------------------------------------


@cli.command()
@click.argument("task_id", type=int, required=False)
@click.option("--task-type", default=None, help="Follow every running task of this type.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Give up after this many seconds."
)
@dsn_option
@json_option
def watch(
    task_id: int | None,
    task_type: str | None,
    timeout: float | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """A live progress bar for one task (or every running task of --task-type), ending with the
    final status. Exit 1 if the task ends in DEAD_LETTER."""
    from taskq.ops import watch as watching

    if (task_id is None) == (task_type is None):
        raise ConfigError("give a TASK_ID or --task-type T (one of them)")
    target = resolve_dsn(dsn)
    if task_type is not None:
        for running in watching.follow_type(target, task_type, timeout=timeout):
            if as_json:
                print_json([_update(u) for u in running])
            else:
                out.print(
                    f"{len(running)} running: "
                    + ", ".join(
                        f"#{u.task_id} {u.percent or 0:.0f}% {safe(u.message or '')}".strip()
                        for u in running
                    )
                    if running
                    else "none running"
                )
        return
    assert task_id is not None
    as_lines = as_json or not sys.stdout.isatty()
    last = None
    if as_lines:
        for update in watching.follow_task(target, task_id, timeout=timeout):
            last = update
            if as_json:
                click.echo(json.dumps(_update(update)))
            else:
                click.echo(plain(update.describe()))
    else:
        bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}% {task.fields[msg]}"),
            console=out,
        )
        with bars:
            bar = bars.add_task(f"task {task_id}", total=100, msg="")
            for update in watching.follow_task(target, task_id, timeout=timeout):
                last = update
                bars.update(
                    bar,
                    completed=update.percent or 0,
                    msg=safe(update.describe().split(" ", 1)[1]),
                )
    if last is None:
        return
    if not last.final:
        raise TaskqError(f"task {task_id} is still {last.status} after {timeout}s")
    if not as_lines:
        out.print(f"task {task_id} {last.status}")
    if last.status == "DEAD_LETTER":
        raise TaskqError(f"task {task_id} ended in DEAD_LETTER: {last.error or ''}".rstrip(": "))


def _update(u: Any) -> dict[str, Any]:
    return {
        "id": u.task_id,
        "task_type": u.task_type,
        "status": u.status,
        "percent": u.percent,
        "message": u.message,
        "error": u.error,
        "retry_at": u.retry_at,
    }


# --- prune ---------------------------------------------------------------------------------


@cli.command()
@click.option("--older-than", required=True, help="Delete finished rows older than this (7d).")
@click.option("--dead-letters", is_flag=True, help="Also delete dead letters that old.")
@click.option("--batch", type=click.IntRange(min=1), default=5000, show_default=True)
@dsn_option
@json_option
def prune(older_than: str, dead_letters: bool, batch: int, dsn: str | None, as_json: bool) -> None:
    """Delete finished (SUCCESS and CANCELLED) rows older than --older-than, in batches; dead
    letters stay unless --dead-letters."""
    from taskq.ops import prune as pruning

    result = pruning.prune(
        resolve_dsn(dsn),
        older_than_seconds=_seconds("--older-than", older_than),
        dead_letters=dead_letters,
        batch=batch,
    )
    if as_json:
        print_json(
            {
                "success": result.success,
                "cancelled": result.cancelled,
                "dead_letter": result.dead_letter,
            }
        )
        return
    click.echo(
        f"deleted {result.success} SUCCESS row(s), {result.cancelled} CANCELLED row(s)"
        + (f" and {result.dead_letter} dead letter(s)" if dead_letters else "")
    )
