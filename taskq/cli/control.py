"""Task control commands: ``taskq cancel``, ``taskq switch``, and the dead-letter handling
record (``taskq dlq assign / resolve / groups / report``). Thin: parse, call ``taskq.ops``,
render (producer strings through ``safe``), exit."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from taskq.cli.main import (
    _duration,
    _filter,
    _filter_options,
    _selection,
    cli,
    dlq,
    dsn_option,
    json_option,
    out,
    print_json,
)
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError
from taskq.model import Resolution
from taskq.ops import cancel as cancel_ops
from taskq.ops import dlq as dlq_ops
from taskq.ops import switches
from taskq.ops.formatting import safe

# --- cancel --------------------------------------------------------------------------------


@cli.command()
@click.argument("ids", nargs=-1, type=int)
@click.option("--task-type", default=None, help="Every unfinished task of this type.")
@click.option("--biz-id", default=None, help="Every unfinished task with this business key.")
@click.option("--with-children", is_flag=True, help="Also cancel their unfinished child tasks.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@dsn_option
@json_option
def cancel(
    ids: tuple[int, ...],
    task_type: str | None,
    biz_id: str | None,
    with_children: bool,
    note: str | None,
    dry_run: bool,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Cancel tasks: PENDING/FAILED ones never run (CANCELLED); a running one is asked to abort
    (its async handler is cancelled; a sync handler sees ctx.cancelled) and ends CANCELLED.
    A SUCCESS or DEAD_LETTER task refuses the whole command."""
    target = cancel_ops.Target(ids=ids, task_type=task_type, biz_id=biz_id)
    where = resolve_dsn(dsn)
    if dry_run:
        result = cancel_ops.preview(where, target)
    else:
        result = cancel_ops.cancel(where, target, with_children=with_children, note=note)
    if as_json:
        print_json({"dry_run": dry_run, **result.as_dict()})
        return
    would = "would " if dry_run else ""
    click.echo(f"{would}cancel {len(result.cancelled)} task(s){_ids(result.cancelled)}")
    if result.aborting:
        verb = "would ask" if dry_run else "asked"
        click.echo(f"{verb} {len(result.aborting)} running task(s) to abort{_ids(result.aborting)}")
    if result.already:
        click.echo(f"{len(result.already)} already cancelled{_ids(result.already)}")
    if result.refused:
        described = ", ".join(f"{r['id']} ({r['status']})" for r in result.refused)
        click.echo(f"refused (the command would change nothing): {described}")


def _ids(ids: list[int]) -> str:
    if not ids:
        return ""
    return ": " + ", ".join(str(i) for i in ids[:20]) + (" ..." if len(ids) > 20 else "")


# --- business switches -----------------------------------------------------------------------


@cli.group()
def switch() -> None:
    """Business switches ("may SMS be sent at all?"), read by handler code with
    ctx.switch(NAME). Not a pause: a pause stops consumption; a switch is the business's
    decision, and the code decides what "off" means."""


@switch.command("set")
@click.argument("name")
@click.argument("value", type=click.Choice(["on", "off"]))
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def switch_set(name: str, value: str, note: str | None, dsn: str | None) -> None:
    """Turn switch NAME on or off (workers see it within a second)."""
    changed = switches.switch_set(resolve_dsn(dsn), name, value == "on", note=note)
    click.echo(f"switch {safe(name)} {'is now' if changed else 'was already'} {value}")


@switch.command("list")
@dsn_option
@json_option
def switch_list(dsn: str | None, as_json: bool) -> None:
    """Every switch ever set (one never set is on, or its declared default)."""
    rows = switches.switch_list(resolve_dsn(dsn))
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no switches set (every switch is on)")
        return
    table = Table(title="business switches", title_justify="left")
    for col in ("name", "value", "changed by", "changed at", "note"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            safe(r["name"]),
            "on" if r["enabled"] else "[red]off[/red]",
            safe(r["changed_by"]),
            str(r["changed_at"])[:19],
            safe(r["note"] or ""),
        )
    out.print(table)


# --- dead letters: the handling record -------------------------------------------------------


def _handling_options(fn: Any) -> Any:
    fn = click.argument("ids", nargs=-1, type=int)(fn)
    fn = click.option("--task-type", default=None, help="Every dead letter of this type.")(fn)
    fn = click.option("--all", "everything", is_flag=True, help="Every dead letter.")(fn)
    fn = _filter_options(fn)
    fn = click.option("--note", default=None, help="Stored with the record and the audit.")(fn)
    return fn


def _handled(verb: str, rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json({"count": len(rows), "records": rows})
        return
    click.echo(f"{verb} {len(rows)} dead letter(s){_ids([int(r['task_id']) for r in rows])}")


@dlq.command("assign")
@_handling_options
@click.option("--to", "to", required=True, help="Who investigates.")
@dsn_option
@json_option
def dlq_assign(
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
    to: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Someone is on it: the dead letters' state becomes investigating, owner --to."""
    where = _filter(biz_id, error, older_than, newer_than, group, state)
    selection = _selection(ids, task_type, everything, where)
    rows = dlq_ops.assign(resolve_dsn(dsn), selection, to=to, note=note)
    _handled(f"assigned to {safe(to)}:", rows, as_json)


@dlq.command("resolve")
@_handling_options
@click.option("--fixed", "resolution", flag_value=Resolution.FIXED.value, help="Code fixed.")
@click.option("--ignored", "resolution", flag_value=Resolution.IGNORED.value, help="Meaningless.")
@dsn_option
@json_option
def dlq_resolve(
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
    resolution: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Close dead letters: --fixed (the code was fixed and the task triggered by hand) or
    --ignored (confirmed meaningless). `dlq requeue` resolves as requeued by itself."""
    if resolution is None:
        raise ConfigError("say how it was resolved: --fixed or --ignored")
    where = _filter(biz_id, error, older_than, newer_than, group, state)
    selection = _selection(ids, task_type, everything, where)
    rows = dlq_ops.resolve(
        resolve_dsn(dsn), selection, resolution=Resolution(resolution), note=note
    )
    _handled(f"resolved as {resolution}:", rows, as_json)


@dlq.command("groups")
@click.option("--task-type", default=None, help="Only this task type.")
@_filter_options
@dsn_option
@json_option
def dlq_groups(
    task_type: str | None,
    biz_id: str | None,
    error: str | None,
    older_than: str | None,
    newer_than: str | None,
    group: str | None,
    state: str | None,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Dead letters grouped by error fingerprint (exception type + message with numbers, ids
    and quoted values masked): handle 5 groups, not 5,000 rows."""
    where = _filter(biz_id, error, older_than, newer_than, group, state, task_type)
    rows = dlq_ops.groups(resolve_dsn(dsn), where)
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no dead letters")
        return
    table = Table(title="dead letters by error group", title_justify="left")
    for col in ("group", "count", "new", "first seen", "last seen", "types", "example"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["fingerprint"],
            str(r["total"]),
            str(r["new"]),
            str(r["first_seen"])[:19],
            str(r["last_seen"])[:19],
            safe(", ".join(r["task_types"])),
            f"#{r['example_id']} " + safe(r["example_error"][:100]),
        )
    out.print(table)


@dlq.command("report")
@click.option("--since", default="12h", show_default=True, help="The window (e.g. 12h, 1d).")
@dsn_option
@json_option
def dlq_report(since: str, dsn: str | None, as_json: bool) -> None:
    """The twice-a-day summary: new dead letters by group, what was resolved and by whom, and
    what is still open."""
    seconds = _duration("--since", since) or 0.0
    report = dlq_ops.report(resolve_dsn(dsn), since_seconds=seconds)
    if as_json:
        print_json(report)
        return
    new = Table(title=f"new dead letters in the last {since}, by group", title_justify="left")
    for col in ("group", "count", "still open", "types", "error"):
        new.add_column(col)
    for r in report["new"]:
        new.add_row(
            r["fingerprint"],
            str(r["total"]),
            str(r["still_open"]),
            safe(", ".join(r["task_types"])),
            safe((r["signature"] or "")[:100]),
        )
    out.print(new if report["new"] else f"no new dead letters in the last {safe(since)}")
    done = Table(title=f"resolved in the last {since}", title_justify="left")
    for col in ("resolution", "by", "count", "groups"):
        done.add_column(col)
    for r in report["resolved"]:
        done.add_row(
            r["resolution"], safe(r["resolved_by"]), str(r["total"]), ", ".join(r["fingerprints"])
        )
    out.print(done if report["resolved"] else f"nothing resolved in the last {safe(since)}")
    still = Table(title="still open", title_justify="left")
    for col in ("group", "state", "owner", "count", "oldest"):
        still.add_column(col)
    for r in report["open"]:
        still.add_row(
            r["fingerprint"],
            r["state"],
            safe(r["owner"] or ""),
            str(r["total"]),
            str(r["oldest"])[:19],
        )
    out.print(still if report["open"] else "nothing open")
