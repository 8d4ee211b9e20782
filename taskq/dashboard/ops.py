"""What the dashboard reads and does that the CLI's domain modules do not already offer: the
dead-letter search by error text and age, the requeue with an edited payload, the audit list
and the task page's data. Sync functions (short sessions, like the CLI's); the app runs them
in worker threads so the event loop never blocks on the database."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from taskq import store
from taskq.db import session
from taskq.errors import ConfigError, PayloadError, TaskNotFound
from taskq.model import Status, check_name, encode_payload

Row = dict[str, Any]

# The audit actions taskq writes (the Audit page's filter offers these).
AUDIT_ACTIONS = (
    "dlq_requeue",
    "dlq_requeue_edited",
    "dlq_discard",
    "pause",
    "resume",
    "breaker_reset",
    "protection_level",
)


def _hours(name: str, text: str | None) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number of hours, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a number of hours >= 0, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """The dead-letter page's filter; every part optional. Age is the time since the task was
    dead-lettered."""

    task_type: str | None = None
    error: str | None = None
    older_than_hours: float | None = None
    newer_than_hours: float | None = None

    @classmethod
    def parse(cls, params: Any) -> DeadFilter:
        """From query or form parameters (a Mapping of str); blanks mean "any"."""
        task_type = (params.get("task_type") or "").strip() or None
        if task_type is not None:
            check_name("task type", task_type)
        return cls(
            task_type=task_type,
            error=(params.get("error") or "").strip() or None,
            older_than_hours=_hours("older than", params.get("older_than")),
            newer_than_hours=_hours("newer than", params.get("newer_than")),
        )

    def params(self) -> dict[str, str]:
        """The non-empty parts, for links that carry the filter along."""
        found = {
            "task_type": self.task_type,
            "error": self.error,
            "older_than": None if self.older_than_hours is None else f"{self.older_than_hours:g}",
            "newer_than": None if self.newer_than_hours is None else f"{self.newer_than_hours:g}",
        }
        return {k: v for k, v in found.items() if v is not None}


@dataclass(frozen=True, slots=True)
class DeadLetters:
    rows: list[Row]
    matching: int
    """How many dead letters match the filter; more than len(rows) when the list was cut."""
    task_types: list[str] = field(default_factory=list)


def search_dead(dsn: str, flt: DeadFilter, *, limit: int) -> DeadLetters:
    """The dead letters matching ``flt``, newest first, and the types that have any."""
    with session(dsn) as conn:
        found = store.dlq_search(
            conn,
            task_type=flt.task_type,
            error=flt.error,
            older_than_seconds=_seconds(flt.older_than_hours),
            newer_than_seconds=_seconds(flt.newer_than_hours),
            limit=limit,
        )
        types = sorted({r["task_type"] for r in store.backlog(conn) if r["dead_letter"]})
    matching = int(found[0]["matching"]) if found else 0
    return DeadLetters(rows=found, matching=matching, task_types=types)


def _seconds(hours: float | None) -> float | None:
    return None if hours is None else hours * 3600


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_payload(text: str, max_bytes: int) -> str:
    """The operator's edited payload as compact JSON text: valid JSON (no NaN/Infinity, which
    jsonb refuses), within the size limit taskq enforces at enqueue."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise PayloadError(f"the payload is not valid JSON: {exc}") from None
    return encode_payload(value, max_bytes)


def requeue_edited(
    dsn: str,
    task_id: int,
    payload_text: str,
    *,
    reset_retries: bool,
    note: str | None,
    by: str,
    max_payload_bytes: int,
) -> None:
    """DEAD_LETTER -> PENDING with a new payload; the audit row keeps the old and the new one."""
    payload_json = parse_payload(payload_text, max_payload_bytes)
    with session(dsn) as conn:
        moved = store.dlq_requeue_edited(
            conn,
            task_id=task_id,
            payload_json=payload_json,
            reset=reset_retries,
            actor=by,
            note=note,
        )
        if not moved:
            row = store.get_task(conn, task_id)
            state = row["status"] if row else "no such task"
            raise TaskNotFound(f"task {task_id} is not a dead letter ({state}), nothing changed")


@dataclass(frozen=True, slots=True)
class TaskDetail:
    row: Row | None
    """None when the task is gone (discarded or pruned); its audit history may remain."""
    tree: list[Row]
    audit: list[Row]

    @property
    def final(self) -> bool:
        return self.row is None or self.row["status"] in (Status.SUCCESS, Status.DEAD_LETTER)


def task_detail(dsn: str, task_id: int) -> TaskDetail:
    with session(dsn) as conn:
        row = store.get_task(conn, task_id)
        tree = store.task_tree(conn, task_id) if row is not None else []
        audit = store.audit_for_task(conn, task_id)
    if row is None and not audit:
        raise TaskNotFound(f"no task with id {task_id}")
    return TaskDetail(row=row, tree=tree, audit=audit)


def audit_log(
    dsn: str, *, action: str | None, task_id: int | None, task_type: str | None, limit: int
) -> list[Row]:
    with session(dsn) as conn:
        return store.audit_list(
            conn, action=action, task_id=task_id, task_type=task_type, limit=limit
        )


def known_names(dsn: str) -> tuple[list[str], list[str]]:
    """Queues and task types with live tasks (suggestions for the pause form)."""
    with session(dsn) as conn:
        found = store.backlog(conn)
    return sorted({r["queue"] for r in found}), sorted({r["task_type"] for r in found})
