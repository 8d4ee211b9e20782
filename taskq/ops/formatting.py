"""How operator data reads as text: ages, percentages, and the ``taskq stats`` report. Shared by
the CLI, the demo and the dashboard, so they all say the same thing the same way."""

from __future__ import annotations

import json
import re
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from taskq.control.state import Level
from taskq.ops import stats as stats_ops

# Everything a terminal may act on: C0 controls (ESC starts colour, cursor, title and clear
# sequences; CR and BS overwrite what was printed), DEL, C1 controls (0x9b is a one-byte CSI),
# and the invisible bidirectional overrides that make text read differently than it is.
_TERMINAL_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]"
)
_LINE_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def plain(value: Any, *, multiline: bool = False) -> str:
    """A producer-controlled value (task type, biz_id, error, payload) as inert text: control
    characters and escape sequences shown as ``\\x1b``-style escapes, never sent to the
    terminal. For output printed without rich markup (``click.echo``, ``markup=False``).
    ``multiline`` keeps newlines and tabs (tracebacks)."""
    text = "" if value is None else str(value)
    return (_TERMINAL_UNSAFE if multiline else _LINE_UNSAFE).sub(_visible, text)


def safe(value: Any, *, multiline: bool = False) -> str:
    """:func:`plain`, and rich markup in it (``[bold red]``, ``[link=...]``) shown literally:
    for every producer-controlled string put into a rich table cell or markup string."""
    return escape(plain(value, multiline=multiline))


PAYLOAD_PREVIEW_CHARS = 16 * 1024


def payload_text(payload: Any, *, full: bool = False) -> str:
    """A payload as indented JSON for a human; beyond PAYLOAD_PREVIEW_CHARS cut short (with
    how much was left out), unless ``full``. ASCII-only JSON: nothing in it reaches a terminal
    as a control character."""
    if not full:
        # A compact encoding first, to size it without indenting megabytes.
        compact = json.dumps(payload)
        if len(compact) > PAYLOAD_PREVIEW_CHARS:
            return (
                compact[:PAYLOAD_PREVIEW_CHARS]
                + f"\n… {len(compact) - PAYLOAD_PREVIEW_CHARS} more characters"
                + " (--full shows the whole payload)"
            )
    return json.dumps(payload, indent=2)


def blocked_reason(key: dict[str, Any]) -> str:
    """Why a blocked ordering key's head does not run, when the database can tell."""
    if key["unregistered"]:
        return "no worker has registered this type"
    if key["unserved"]:
        return "no live worker serves this queue"
    if key["head_status"] == "FAILED":
        return "the head is failing and waits for its retry"
    return ""


def age(seconds: float | None) -> str:
    """A duration as an operator reads it: ``4.2s``, ``3m05s``, ``2h10m``, ``1d03h``."""
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ms(values: list[float] | None, index: int) -> str:
    if not values or values[index] is None:
        return "-"
    seconds = values[index]
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.1f}s" if seconds < 10 else age(seconds)


LEGEND = (
    "runnable: can run now · oldest: its wait · sched.: due later · retry wait: failed, "
    "waiting for its retry · /min: finished per minute · ok/fail: share of attempts in the "
    "window · cancel: attempts cancelled (--wide) · dispatch: runnable → started · run: "
    "started → finished (p50/p99; --wide adds "
    "p95) · retries 2:5 = 5 tasks finished after 2 retries · DLQ (+new): dead letters (new in "
    "the window) · retry due: failed and due, with the oldest's wait (the retry lane) · running "
    "2/3: running/cap · limited N: due tasks a flow limit holds back (taskq limits)"
)


def render_report(report: stats_ops.Report, out: Console, *, wide: bool = False) -> None:
    """The human form of `taskq stats` (also printed at the end of `taskq demo`). It fits 120
    columns; ``wide`` adds the scheduled and retry counts and the p95 latencies."""
    minutes = report.minutes
    level = Level(int(report.protection["level"]))
    colour = "green" if level == Level.NORMAL else ("yellow" if level < Level.DEGRADED else "red")
    out.print(
        f"protection: [{colour}]L{int(level)} {level.name}[/{colour}]"
        + (f" — {safe(report.protection['reason'])}" if report.protection["reason"] else "")
    )
    points = (0, 1, 2) if wide else (0, 2)
    if not report.types:
        out.print("no tasks")
    else:
        table = Table(
            title=f"taskq — last {minutes} min",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            padding=(0, 1),
            collapse_padding=True,
        )
        columns = ["queue", "task type", "runnable", "oldest"]
        columns += ["sched.", "retry wait", "retry due"] if wide else []
        columns += ["running", "/min", "ok", "fail"]
        columns += ["cancel"] if wide else []
        columns += ["dispatch", "run"]
        columns += ["retries"] if wide else []
        columns += ["DLQ (+new)", "state"]
        for col in columns:
            text = col in ("queue", "task type", "state")
            table.add_column(
                col,
                justify="left" if text else "right",
                overflow="fold",
                no_wrap=not text,
                min_width={"queue": 7, "task type": 16, "state": 5}.get(col),
            )
        for t in report.types:
            b = t.backlog
            state = []
            if t.paused:
                state.append("[yellow]paused[/yellow]")
            if t.breaker != "CLOSED":
                state.append(f"[red]breaker {t.breaker}[/red]")
            if t.limits is not None and t.limits["held"]:
                state.append(f"[yellow]limited {t.limits['held']}[/yellow]")
            running_text = str(b.get("processing", 0))
            if t.limits is not None and t.limits["max_running"]:
                running_text += f"/{t.limits['max_running']}"
            retries = " ".join(f"{k}:{v}" for k, v in sorted(t.retries.items())) or "-"
            dlq = b.get("dead_letter", 0)
            cells = [
                safe(t.queue),
                safe(t.task_type),
                str(b.get("runnable", 0)),
                age(t.oldest_runnable_seconds),
            ]
            if wide:
                cells += [
                    str(b.get("scheduled", 0)),
                    str(b.get("retry_waiting", 0)),
                    f"{b['retry_due']} ({age(t.oldest_retry_seconds)})"
                    if b.get("retry_due")
                    else "0",
                ]
            elif b.get("retry_due"):
                state.append(f"{b['retry_due']} retries due ({age(t.oldest_retry_seconds)})")
            cells += [
                running_text,
                f"{t.per_minute:.1f}",
                _pct(t.success_rate),
                _pct(t.failure_rate),
            ]
            if wide:
                cells.append(str(t.outcomes.get("cancelled", 0)))
            cells += [
                "/".join(_ms(t.dispatch_seconds, i) for i in points),
                "/".join(_ms(t.run_seconds, i) for i in points),
            ]
            if wide:
                cells.append(retries)
            cells += [
                (f"[red]{dlq}[/red]" if dlq else "0")
                + (f" [red](+{t.dead_letter_growth})[/red]" if t.dead_letter_growth else ""),
                " ".join(state) or "ok",
            ]
            table.add_row(*cells)
        out.print(table)
        out.print(f"[dim]{LEGEND}[/dim]")
    if report.capacity and not any(c["workers"] for c in report.capacity.values()):
        running = sum(c["running"] for c in report.capacity.values())
        out.print(
            "running vs capacity: no live workers"
            + (f" ({running} tasks still marked running)" if running else "")
        )
    elif report.capacity:
        cap = Table(title="running vs capacity (live workers)", title_justify="left")
        for col in ("queue", "running", "slots", "workers"):
            cap.add_column(col)
        for queue, c in sorted(report.capacity.items()):
            cap.add_row(safe(queue), str(c["running"]), str(c["slots"]), str(c["workers"]))
        out.print(cap)
    if report.pauses:
        for p in report.pauses:
            out.print(
                f"[yellow]paused[/yellow] {p['kind']} {safe(p['name'])} by {safe(p['paused_by'])} "
                f"since {str(p['paused_at'])[:19]} ({age(p['paused_seconds'])})"
                + (f" — {safe(p['note'])}" if p["note"] else "")
            )
    if report.standby:
        out.print("[yellow]this server is a hot standby: read-only[/yellow]")
    for r in report.replication:
        lag = r["replay_lag_seconds"]
        lag_bytes = r["replay_lag_bytes"]
        out.print(
            f"standby {escape(str(r['application_name']))} ({r['sync_state'] or '?'}, "
            f"{r['state'] or '?'}): replay lag "
            f"{'-' if lag is None else f'{lag:.2f}s'}, "
            f"{'-' if lag_bytes is None else f'{lag_bytes} bytes'}"
        )
    for w in report.not_claiming:
        out.print(
            f"[red]not claiming[/red] worker {escape(str(w['worker_id']))} (pid {w['pid']}) "
            f"for {age(w['seconds'])}: {escape(str(w['reason']))}"
        )
    for sw in report.switches:
        if not sw["enabled"]:
            out.print(
                f"[yellow]switch off[/yellow] {safe(sw['name'])} by {safe(sw['changed_by'])} "
                f"since {str(sw['changed_at'])[:19]}"
                + (f" — {safe(sw['note'])}" if sw["note"] else "")
            )
    if report.blocked_keys:
        blocked = Table(
            title="[yellow]blocked ordering keys[/yellow] (a head task holds later ones back)",
            title_justify="left",
        )
        for col in ("ordering key", "head task", "type", "queue", "status", "waiting", "behind"):
            blocked.add_column(col)
        for k in report.blocked_keys:
            blocked.add_row(
                safe(k["ordering_key"]),
                str(k["head_id"]),
                safe(k["head_task_type"]),
                safe(k["head_queue"]),
                k["head_status"],
                age(k["head_waiting_seconds"]),
                str(k["waiting"]),
            )
            if why := blocked_reason(k):
                blocked.add_row("", "", f"[yellow]{why}[/yellow]", "", "", "", "")
        out.print(blocked)
    h = report.health
    if h:
        out.print(
            f"database: {h['dead_tuples']} dead tuples in taskq.tasks; oldest transaction "
            f"{age(h['oldest_transaction_seconds'])}; NOTIFY queue "
            f"{100 * (h['notification_queue_usage'] or 0):.1f}% full"
        )
