"""The operator's commands: stats, plan, pause/resume, circuit, watch, prune. Thin like the rest
of the CLI: parse, call one domain function, render, exit."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from taskq import stats as stats_ops
from taskq import switches
from taskq.cli import age, cli, dsn_option, json_option, out, print_json
from taskq.config import resolve_dsn
from taskq.control import Level
from taskq.errors import ConfigError, TaskqError


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(values: list[float] | None, index: int) -> str:
    if not values or values[index] is None:
        return "-"
    seconds = values[index]
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else age(seconds)


# --- stats ---------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--minutes",
    type=click.IntRange(min=1),
    default=15,
    show_default=True,
    help="The window for throughput, rates and latencies.",
)
@dsn_option
@json_option
def stats(minutes: int, dsn: str | None, as_json: bool) -> None:
    """Backlog, throughput, failure rates, latency percentiles, retries, dead letters, running vs
    capacity, pauses and protection — per queue and task type."""
    report = stats_ops.report(resolve_dsn(dsn), minutes)
    if as_json:
        print_json(report.as_dict())
        return
    render_report(report)


def render_report(report: stats_ops.Report) -> None:
    """The human form of `taskq stats` (also printed at the end of `taskq demo`)."""
    minutes = report.minutes
    level = Level(int(report.protection["level"]))
    colour = "green" if level == Level.NORMAL else ("yellow" if level < Level.DEGRADED else "red")
    out.print(
        f"protection: [{colour}]L{int(level)} {level.name}[/{colour}]"
        + (f" — {report.protection['reason']}" if report.protection["reason"] else "")
    )
    if not report.types:
        out.print("no tasks")
    else:
        table = Table(title=f"taskq — last {minutes} min", title_justify="left")
        for col in (
            "queue",
            "task type",
            "runnable",
            "oldest",
            "sched.",
            "retry wait",
            "running",
            "/min",
            "ok",
            "fail",
            "dispatch p50/p95/p99",
            "run p50/p95/p99",
            "retries",
            "DLQ (+new)",
            "state",
        ):
            table.add_column(
                col, justify="left" if col in ("queue", "task type", "state") else "right"
            )
        for t in report.types:
            b = t.backlog
            state = []
            if t.paused:
                state.append("[yellow]paused[/yellow]")
            if t.breaker != "CLOSED":
                state.append(f"[red]breaker {t.breaker}[/red]")
            retries = " ".join(f"{k}:{v}" for k, v in sorted(t.retries.items())) or "-"
            dlq = b.get("dead_letter", 0)
            table.add_row(
                t.queue,
                t.task_type,
                str(b.get("runnable", 0)),
                age(t.oldest_runnable_seconds),
                str(b.get("scheduled", 0)),
                str(b.get("retry_waiting", 0)),
                str(b.get("processing", 0)),
                f"{t.per_minute:.1f}",
                _pct(t.success_rate),
                _pct(t.failure_rate),
                "/".join(_ms(t.dispatch_seconds, i) for i in range(3)),
                "/".join(_ms(t.run_seconds, i) for i in range(3)),
                retries,
                (f"[red]{dlq}[/red]" if dlq else "0")
                + (f" [red](+{t.dead_letter_growth})[/red]" if t.dead_letter_growth else ""),
                " ".join(state) or "ok",
            )
        out.print(table)
    if report.capacity:
        cap = Table(title="running vs capacity (live workers)", title_justify="left")
        for col in ("queue", "running", "slots", "workers"):
            cap.add_column(col)
        for queue, c in sorted(report.capacity.items()):
            cap.add_row(queue, str(c["running"]), str(c["slots"]), str(c["workers"]))
        out.print(cap)
    if report.pauses:
        for p in report.pauses:
            out.print(
                f"[yellow]paused[/yellow] {p['kind']} {p['name']} by {p['paused_by']} "
                f"since {str(p['paused_at'])[:19]} ({age(p['paused_seconds'])})"
                + (f" — {p['note']}" if p["note"] else "")
            )
    h = report.health
    if h:
        out.print(
            f"database: {h['dead_tuples']} dead tuples in taskq.tasks; oldest transaction "
            f"{age(h['oldest_transaction_seconds'])}; NOTIFY queue "
            f"{100 * (h['notification_queue_usage'] or 0):.1f}% full"
        )


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
    dsn: str | None,
    as_json: bool,
) -> None:
    """Size workers with Little's law: concurrency = throughput x mean run time."""
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
    result = stats_ops.plan(
        tasks=tasks,
        within_seconds=window,
        mean_seconds=mean,
        source=source,
        task_type=task_type,
        processes=processes,
        cpu_bound=cpu_bound,
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
        f" (since {str(status['changed_at'])[:19]}, by {status['changed_by']})"
    )
    if status["reason"]:
        out.print(f"reason: {status['reason']}", markup=False)
    if not status["breakers"]:
        out.print("breakers: none has tripped")
        return
    table = Table(title="breakers", title_justify="left")
    for col in ("task type", "state", "consecutive failures", "opened", "reason"):
        table.add_column(col)
    for b in status["breakers"]:
        table.add_row(
            b["task_type"],
            b["state"],
            str(b["consecutive_failures"]),
            str(b["opened_at"])[:19] if b["opened_at"] else "-",
            b["reason"] or "",
        )
    out.print(table)


@circuit.command("reset")
@click.option("--task-type", default=None, help="Close only this type's breaker.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def circuit_reset(task_type: str | None, note: str | None, dsn: str | None) -> None:
    """Close the breakers and bring the level back to L0 (the only way out of L4)."""
    result = switches.circuit_reset(resolve_dsn(dsn), task_type=task_type, note=note)
    closed = ", ".join(result["closed_breakers"]) or "none"
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
    from taskq import watch as watching

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
                        f"#{u.task_id} {u.percent or 0:.0f}% {u.message or ''}".strip()
                        for u in running
                    )
                    if running
                    else "none running"
                )
        return
    assert task_id is not None
    plain = as_json or not sys.stdout.isatty()
    last = None
    if plain:
        for update in watching.follow_task(target, task_id, timeout=timeout):
            last = update
            if as_json:
                click.echo(json.dumps(_update(update)))
            else:
                click.echo(
                    f"#{update.task_id} {update.status} "
                    f"{'-' if update.percent is None else f'{update.percent:.0f}%'} "
                    f"{update.message or ''}".rstrip()
                )
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
                    msg=f"{update.status} {update.message or ''}",
                )
    if last is None:
        return
    if not last.final:
        raise TaskqError(f"task {task_id} is still {last.status} after {timeout}s")
    if not plain:
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
    }


# --- prune ---------------------------------------------------------------------------------


@cli.command()
@click.option("--older-than", required=True, help="Delete finished rows older than this (7d).")
@click.option("--dead-letters", is_flag=True, help="Also delete dead letters that old.")
@click.option("--batch", type=click.IntRange(min=1), default=5000, show_default=True)
@dsn_option
@json_option
def prune(older_than: str, dead_letters: bool, batch: int, dsn: str | None, as_json: bool) -> None:
    """Delete finished (SUCCESS) rows older than --older-than, in batches; dead letters stay
    unless --dead-letters."""
    from taskq import prune as pruning

    result = pruning.prune(
        resolve_dsn(dsn),
        older_than_seconds=_seconds("--older-than", older_than),
        dead_letters=dead_letters,
        batch=batch,
    )
    if as_json:
        print_json({"success": result.success, "dead_letter": result.dead_letter})
        return
    click.echo(
        f"deleted {result.success} SUCCESS row(s)"
        + (f" and {result.dead_letter} dead letter(s)" if dead_letters else "")
    )
