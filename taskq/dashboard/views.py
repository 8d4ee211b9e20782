"""The overview as one view model: the server renders it into the page, and the page's script
swaps in the same structure from ``/api/overview`` every couple of seconds. Numbers are
formatted here, once, so the script only places text (``textContent``: nothing it receives is
ever parsed as HTML)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

from taskq.control.state import Level
from taskq.ops.formatting import age as age  # re-exported for the templates
from taskq.ops.formatting import blocked_reason
from taskq.ops.stats import Report

Cell = dict[str, Any]
TableRow = dict[str, Any]

HEADERS: dict[str, list[str]] = {
    "types": [
        "queue",
        "task type",
        "runnable",
        "scheduled",
        "retry waiting",
        "running",
        "dead letters",
        "oldest runnable",
        "done / min",
        "failure rate",
        "cancelled",
        "state",
    ],
    "queues": ["queue", "running", "slots", "workers", "use"],
    "pauses": ["kind", "name", "by", "for", "note"],
    "breakers": ["task type", "state", "since", "reason"],
    "limits": ["task type", "running / cap", "per key", "rate", "tokens", "fair", "limited"],
    "blocked": ["ordering key", "head task", "type", "queue", "status", "waiting", "behind", "why"],
}
EMPTY = {
    "types": "no tasks",
    "queues": "no queues",
    "pauses": "nothing is paused",
    "breakers": "every breaker is closed",
    "limits": "no flow limits (taskq limits set TYPE ...)",
    "blocked": "no ordering key is blocked",
}


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def when(value: dt.datetime | None) -> str:
    return "-" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


PAYLOAD_PREVIEW_CHARS = 64 * 1024


def payload_preview(value: Any, *, full: bool) -> tuple[str, int]:
    """The payload as the task page shows it, and how many characters were left out (0: all
    of it). A multi-megabyte payload would make the page huge and slow to render."""
    if not full:
        compact = json.dumps(value, ensure_ascii=False, default=str)
        if len(compact) > PAYLOAD_PREVIEW_CHARS:
            return compact[:PAYLOAD_PREVIEW_CHARS], len(compact) - PAYLOAD_PREVIEW_CHARS
    return pretty_json(value), 0


def level_class(level: int) -> str:
    return "ok" if level == Level.NORMAL else ("warn" if level < Level.DEGRADED else "bad")


def _cell(k: str, text: object, *, value: Any = None, cls: str = "", href: str = "") -> Cell:
    return {"k": k, "text": str(text), "value": value, "cls": cls, "href": href}


def _num(k: str, n: int, *, alert: bool = False, href: str = "") -> Cell:
    return _cell(k, n, value=n, cls="num" + (" alert" if alert and n else ""), href=href)


def overview(report: Report) -> dict[str, Any]:
    """The view model of ``/`` and ``/api/overview``."""
    level = Level(int(report.protection["level"]))
    types: list[TableRow] = []
    for t in report.types:
        b = t.backlog
        dead = int(b.get("dead_letter", 0))
        state = []
        if t.paused:
            state.append("paused")
        if t.breaker != "CLOSED":
            state.append(f"breaker {t.breaker}")
        if t.limits is not None and t.limits["held"]:
            state.append(f"limited {t.limits['held']}")
        types.append(
            {
                "attrs": {"data-queue": t.queue, "data-task-type": t.task_type},
                "cells": [
                    _cell("queue", t.queue),
                    _cell("task_type", t.task_type),
                    _num("runnable", int(b.get("runnable", 0))),
                    _num("scheduled", int(b.get("scheduled", 0))),
                    _num("retry_waiting", int(b.get("retry_waiting", 0))),
                    _num("running", int(b.get("processing", 0))),
                    _num(
                        "dead_letter",
                        dead,
                        alert=True,
                        href="/dlq?" + urlencode({"task_type": t.task_type}) if dead else "",
                    ),
                    _cell(
                        "oldest_runnable",
                        age(t.oldest_runnable_seconds),
                        value=t.oldest_runnable_seconds,
                        cls="num",
                    ),
                    _cell("per_minute", f"{t.per_minute:.2f}", value=t.per_minute, cls="num"),
                    _cell(
                        "failure_rate",
                        pct(t.failure_rate),
                        value=t.failure_rate,
                        cls="num" + (" alert" if t.failure_rate else ""),
                    ),
                    _num("cancelled", int(t.outcomes.get("cancelled", 0))),
                    _cell("state", ", ".join(state) or "running", cls="alert" if state else ""),
                ],
            }
        )
    queues: list[TableRow] = []
    for name, c in sorted(report.capacity.items()):
        use = f"{c['running']}/{c['slots']}" if c["slots"] else f"{c['running']}/- (no workers)"
        queues.append(
            {
                "attrs": {"data-queue": name},
                "cells": [
                    _cell("queue", name),
                    _num("running", c["running"]),
                    _num("slots", c["slots"]),
                    _num("workers", c["workers"]),
                    _cell("use", use, cls="num"),
                ],
            }
        )
    pauses = [
        {
            "attrs": {"data-kind": p["kind"], "data-name": p["name"]},
            "cells": [
                _cell("kind", p["kind"].replace("_", " ")),
                _cell("name", p["name"]),
                _cell("by", p["paused_by"]),
                _cell("for", age(p["paused_seconds"]), cls="num"),
                _cell("note", p["note"] or ""),
            ],
        }
        for p in report.pauses
    ]
    breakers = [
        {
            "attrs": {"data-task-type": b["task_type"]},
            "cells": [
                _cell("task_type", b["task_type"]),
                _cell("state", b["state"], cls="alert"),
                _cell("since", when(b["changed_at"])),
                _cell("reason", b["reason"] or ""),
            ],
        }
        for b in report.breakers
        if b["state"] != "CLOSED"
    ]
    limits = [
        {
            "attrs": {"data-task-type": f["task_type"]},
            "cells": [
                _cell("task_type", f["task_type"]),
                _cell(
                    "running",
                    f"{f['running']} / {f['max_running'] or '-'}",
                    value=f["running"],
                    cls="num",
                ),
                _cell("per_key", f["max_running_per_key"] or "-", cls="num"),
                _cell("rate", f["rate_text"] or "-"),
                _cell(
                    "tokens", f"{f['tokens']:.1f}" if f["tokens"] is not None else "-", cls="num"
                ),
                _cell("fair", "yes" if f["fair"] else "no"),
                _num("limited", int(f["held"]), alert=True),
            ],
        }
        for f in report.limits
    ]
    blocked = [
        {
            "attrs": {"data-ordering-key": k["ordering_key"]},
            "cells": [
                _cell("ordering_key", k["ordering_key"]),
                _cell("head", str(k["head_id"]), href=f"/tasks/{k['head_id']}"),
                _cell("task_type", k["head_task_type"]),
                _cell("queue", k["head_queue"]),
                _cell("status", k["head_status"], cls="alert"),
                _cell("waiting", age(k["head_waiting_seconds"]), cls="num"),
                _num("behind", int(k["waiting"])),
                _cell("why", blocked_reason(k)),
            ],
        }
        for k in report.blocked_keys
    ]
    health = report.health or {}
    return {
        "minutes": report.minutes,
        "generated_at": when(dt.datetime.now(dt.UTC)),
        "protection": {
            "level": int(level),
            "text": f"L{int(level)} {level.name}",
            "reason": report.protection["reason"] or "",
            "cls": level_class(level),
        },
        "tables": {
            "types": types,
            "queues": queues,
            "pauses": pauses,
            "breakers": breakers,
            "limits": limits,
            "blocked": blocked,
        },
        "health": (
            f"dead tuples {health.get('dead_tuples', '-')}, "
            f"oldest transaction {age(health.get('oldest_transaction_seconds'))}, "
            f"NOTIFY queue {pct(health.get('notification_queue_usage'))}"
            if health
            else "-"
        ),
    }


def mib(n: int | None) -> str:
    """Bytes as MiB, for the workers page; "-" before the first report."""
    return "-" if n is None else f"{n / 2**20:.0f} MiB"
