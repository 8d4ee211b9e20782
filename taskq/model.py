"""Pure data: statuses, rows, options and the validation of names. No I/O here."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

from taskq.errors import InvalidTask, PayloadError

JSON: TypeAlias = Any
"""A JSON-serialisable value (the payload)."""

DEFAULT_QUEUE = "default"
DEFAULT_MAX_RETRY_COUNT = 5
DEFAULT_TIMEOUT_SECONDS = 1800
DEFAULT_RETRY_DELAY_SECONDS = 60.0
DEFAULT_RETRY_JITTER_SECONDS = 30.0
DEFAULT_MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
MAX_NAME_LENGTH = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class Status(StrEnum):
    """The task states; values equal the database text exactly."""

    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEAD_LETTER = "DEAD_LETTER"


def check_name(kind: str, value: object) -> str:
    """Validate a task type or queue name (the same rule as the table's CHECK constraints).

    Rejecting here gives a clear message instead of a constraint violation, and keeps names
    safe to show in logs, metrics and terminals.
    """
    if not isinstance(value, str):
        raise InvalidTask(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidTask(f"{kind} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidTask(f"{kind} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if _CONTROL.search(value):
        raise InvalidTask(f"{kind} {value!r} contains control characters")
    if value != value.strip():
        raise InvalidTask(f"{kind} {value!r} has leading or trailing blanks")
    return value


def check_priority(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -32768 <= value <= 32767:
        raise InvalidTask(f"priority must be an integer in -32768..32767, got {value!r}")
    return value


_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode_payload(payload: JSON, max_bytes: int) -> str:
    """Serialise a payload to JSON text, enforcing the size limit before anything is written."""
    try:
        text = _ENCODE(payload)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
    if len(text) * 4 > max_bytes:  # could be over (4 bytes per character at most): measure
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            raise PayloadError(f"payload is {size} bytes; the limit is {max_bytes} bytes")
    return text


def new_trace_id() -> str:
    """32 random hex digits (a UUID's worth of randomness, without building a UUID)."""
    return os.urandom(16).hex()


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a task type is enqueued and retried (set by ``@app.task``)."""

    task_type: str
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_retry_count: int = DEFAULT_MAX_RETRY_COUNT
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    retry_delay_seconds: float = DEFAULT_RETRY_DELAY_SECONDS
    retry_jitter_seconds: float = DEFAULT_RETRY_JITTER_SECONDS
    idempotent: bool = False
    essential: bool = False
    """Keeps running at protection level L2 (DEGRADED)."""


@dataclass(slots=True)
class ClaimedTask:
    """One attempt, as the claim returned it. Treat as read-only; not ``frozen`` because a
    frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for each of its fields,
    and one of these is built per task on the hot path."""

    id: int
    task_type: str
    queue: str
    biz_id: str | None
    payload: JSON
    priority: int
    retry_count: int
    max_retry_count: int
    timeout_seconds: int
    effective_id: uuid.UUID
    trace_id: str | None
    created_at: dt.datetime
    scheduled_at: dt.datetime
    started_at: dt.datetime
    context: JSON = None
    parent_id: int | None = None
    ordering_key: str | None = None
    ready_at: dt.datetime | None = None
    """When the row became runnable (scheduled_at, or next_retry_time for a retry): the start
    of its dispatch latency."""


@dataclass(frozen=True, slots=True)
class Finished:
    """What a failure update did to the row (returned by the guarded statement)."""

    status: Status
    retry_count: int
    next_retry_time: dt.datetime | None
