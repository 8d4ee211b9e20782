"""What the dashboard reads and does that the operator API (``taskq.ops``) does not already
offer: the dead-letter search by error text and age, the requeue with an edited payload, the
names for the pause form. The task page and the audit list come from ``taskq.ops.tasks`` and
``taskq.ops.audit``, which the CLI shares. Sync functions (short sessions, like the CLI's);
the app runs them in worker threads so the event loop never blocks on the database."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError, PayloadError, TaskNotFound
from taskq.model import DeadLetterFilter, DeadLetterState, check_name, encode_payload

Row = dict[str, Any]


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
    group: str | None = None
    state: DeadLetterState | None = None

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
            group=_group(params.get("group")),
            state=_state(params.get("state")),
        )

    def params(self) -> dict[str, str]:
        """The non-empty parts, for links that carry the filter along."""
        found = {
            "task_type": self.task_type,
            "error": self.error,
            "older_than": None if self.older_than_hours is None else f"{self.older_than_hours:g}",
            "newer_than": None if self.newer_than_hours is None else f"{self.newer_than_hours:g}",
            "group": self.group,
            "state": None if self.state is None else self.state.value,
        }
        return {k: v for k, v in found.items() if v is not None}

    def where(self) -> DeadLetterFilter:
        return DeadLetterFilter(
            task_type=self.task_type,
            error=self.error,
            older_than_seconds=_seconds(self.older_than_hours),
            newer_than_seconds=_seconds(self.newer_than_hours),
            fingerprint=self.group,
            state=self.state,
        )


def _group(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    if not value:
        return None
    if len(value) != 12 or any(c not in "0123456789abcdef" for c in value):
        raise ConfigError(f"an error group is 12 hex characters, got {text!r}")
    return value


def _state(text: str | None) -> DeadLetterState | None:
    value = (text or "").strip()
    if not value:
        return None
    try:
        return DeadLetterState(value)
    except ValueError:
        raise ConfigError(f"state is new, investigating or resolved, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class DeadLetters:
    rows: list[Row]
    matching: int
    """How many dead letters match the filter; more than len(rows) when the list was cut."""
    task_types: list[str] = field(default_factory=list)


def search_dead(dsn: str, flt: DeadFilter, *, limit: int) -> DeadLetters:
    """The dead letters matching ``flt``, newest first, and the types that have any."""
    with session(dsn) as conn:
        found = store.dlq_list(conn, limit=limit, where=flt.where())
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


def known_names(dsn: str) -> tuple[list[str], list[str]]:
    """Queues and task types with live tasks (suggestions for the pause form)."""
    with session(dsn) as conn:
        found = store.backlog(conn)
    return sorted({r["queue"] for r in found}), sorted({r["task_type"] for r in found})
