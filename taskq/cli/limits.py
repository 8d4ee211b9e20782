"""``taskq limits``: see and change flow control at run time (caps, rates, fair share, the
retry lane). Thin: parse, call ``taskq.ops.limits``, render."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from taskq.cli.main import cli, dsn_option, json_option, out, print_json
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError
from taskq.ops import limits as limits_ops


def _count_or_none(option: str, text: str | None) -> tuple[int | None, bool]:
    """``--max-running 3`` -> (3, False); ``--max-running none`` -> (None, True)."""
    if text is None:
        return None, False
    if text.strip().lower() in ("none", "off", "0"):
        return None, True
    try:
        return int(text), False
    except ValueError:
        raise ConfigError(f"{option} takes a whole number or 'none', got {text!r}") from None


@cli.group(invoke_without_command=True)
@dsn_option
@json_option
@click.pass_context
def limits(ctx: click.Context, dsn: str | None, as_json: bool) -> None:
    """Cluster-wide flow control: running caps, rates and fair share per task type, and the
    retry lane per queue. Without a subcommand: list them, with what runs and waits now."""
    if ctx.invoked_subcommand is not None:
        return
    found = limits_ops.list_limits(resolve_dsn(dsn))
    if as_json:
        print_json(found)
        return
    if not found["task_types"]:
        out.print("no task type has flow limits")
    else:
        table = Table(title="flow limits", title_justify="left")
        for col in ("task type", "running", "cap", "per key", "rate", "tokens", "fair",
                    "waiting", "limited", "set by"):  # fmt: skip
            table.add_column(col)
        for row in found["task_types"]:
            table.add_row(
                Text(row["task_type"]),
                str(row["running"]),
                str(row["max_running"] or "-"),
                str(row["max_running_per_key"] or "-"),
                Text(f"{row['rate_text']} (burst {row['burst']:g})" if row["rate"] else "-"),
                f"{row['tokens']:.1f}" if row["tokens"] is not None else "-",
                "yes" if row["fair"] else "no",
                str(row["waiting"]),
                str(row["held"]),
                Text(f"{row['source']}: {row['changed_by']}"),
            )
        out.print(table)
    shares = ", ".join(f"{q['queue']}={q['retry_share']:g}" for q in found["queues"])
    out.print(Text(f"retry share: {shares or 'every queue'} (default 0.5)"))


@limits.command("set")
@click.argument("task_type")
@click.option("--max-running", default=None, help="Cluster-wide running cap, or 'none'.")
@click.option(
    "--max-running-per-key", default=None, help="Running cap per concurrency_key, or 'none'."
)
@click.option("--rate", default=None, help="Attempt starts, e.g. 20/s, 100/m, 500/h; or 'none'.")
@click.option("--burst", type=float, default=None, help="Token bucket size (default: 1 s of rate).")
@click.option("--fair/--no-fair", default=None, help="Claim round-robin across concurrency keys.")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def limits_set(
    task_type: str,
    max_running: str | None,
    max_running_per_key: str | None,
    rate: str | None,
    burst: float | None,
    fair: bool | None,
    note: str | None,
    dsn: str | None,
) -> None:
    """Change a type's limits now, on every worker (their next claim obeys). The operator's
    settings win over the code's until `taskq limits reset`."""
    cap, clear_cap = _count_or_none("--max-running", max_running)
    per_key, clear_per_key = _count_or_none("--max-running-per-key", max_running_per_key)
    clear_rate = rate is not None and rate.strip().lower() in ("none", "off")
    clear = tuple(
        name
        for name, flag in (
            ("max_running", clear_cap),
            ("max_running_per_key", clear_per_key),
            ("rate", clear_rate),
        )
        if flag
    )
    if not (cap or per_key or rate or burst or fair is not None or clear):
        raise ConfigError("nothing to set: give --max-running, --rate, --fair, ...")
    row = limits_ops.set_limits(
        resolve_dsn(dsn),
        task_type,
        limits_ops.LimitChange(
            max_running=cap,
            max_running_per_key=per_key,
            rate=None if clear_rate else rate,
            burst=burst,
            fair=fair,
            clear=clear,
        ),
        note=note,
    )
    out.print(
        Text(
            f"{row['task_type']}: max_running={row['max_running'] or 'none'}"
            f" max_running_per_key={row['max_running_per_key'] or 'none'}"
            f" rate={row['rate_text'] or 'none'}"
            + (f" burst={row['burst']:g}" if row["burst"] else "")
            + f" fair={'yes' if row['fair'] else 'no'}"
        )
    )


@limits.command("reset")
@click.argument("task_type")
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def limits_reset(task_type: str, note: str | None, dsn: str | None) -> None:
    """Forget the operator's limits of a type: workers apply the code's again at their start."""
    removed = limits_ops.reset_limits(resolve_dsn(dsn), task_type, note=note)
    out.print(Text(f"{task_type}: limits removed" if removed else f"{task_type} had no limits"))


@limits.command("queue")
@click.argument("queue")
@click.option(
    "--retry-share",
    type=float,
    required=True,
    help="Share of each claim due retries may take while fresh work waits (0-1; default 0.5).",
)
@click.option("--note", default=None, help="Why (stored in the audit table).")
@dsn_option
def limits_queue(queue: str, retry_share: float, note: str | None, dsn: str | None) -> None:
    """Set a queue's retry lane: retries never take more than this share while fresh work
    waits, and fresh work never takes more than the rest while retries are due."""
    share = limits_ops.set_retry_share(resolve_dsn(dsn), queue, retry_share, note=note)
    out.print(Text(f"queue {queue}: retry share {share:g}"))
