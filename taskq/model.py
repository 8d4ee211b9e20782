"""Pure data: statuses, rows, options and the validation of names. No I/O here."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Mapping
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
MAX_KEY_LENGTH = 255
"""biz_id, unique_key and ordering_key: with a 200-character task type, an index entry stays
under PostgreSQL's b-tree limit (about 2,700 bytes) even at 4 bytes per character."""
MAX_TRACE_ID_LENGTH = 64

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone: a pair is one character in Python


class Status(StrEnum):
    """The task states; values equal the database text exactly."""

    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DEAD_LETTER = "DEAD_LETTER"
    CANCELLED = "CANCELLED"


FINAL_STATUSES = frozenset({Status.SUCCESS, Status.DEAD_LETTER, Status.CANCELLED})


class DeadLetterState(StrEnum):
    """The handling record of a dead letter: nobody looked yet, someone is on it, done."""

    NEW = "new"
    INVESTIGATING = "investigating"
    RESOLVED = "resolved"


class Resolution(StrEnum):
    REQUEUED = "requeued"  # the data was fixed and the task re-sent
    FIXED = "fixed"  # the code was fixed and the task triggered by hand
    IGNORED = "ignored"  # confirmed meaningless


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters an operation means; None = not filtered on that. Ages are seconds
    since the task was dead-lettered."""

    ids: tuple[int, ...] | None = None
    task_type: str | None = None
    biz_id: str | None = None
    error: str | None = None
    older_than_seconds: float | None = None
    newer_than_seconds: float | None = None
    fingerprint: str | None = None
    state: DeadLetterState | None = None

    def params(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids) if self.ids else None,
            "task_type": self.task_type,
            "biz_id": self.biz_id,
            "error": self.error,
            "older_than": self.older_than_seconds,
            "newer_than": self.newer_than_seconds,
            "fingerprint": self.fingerprint,
            "state": self.state.value if self.state is not None else None,
        }

    @property
    def narrowed(self) -> bool:
        """True when anything at all is filtered on."""
        return any(v is not None for v in self.params().values())


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
    if _CONTROL.search(value) or _SURROGATE.search(value):
        raise InvalidTask(f"{kind} {value!r} contains control characters or lone surrogates")
    if value != value.strip():
        raise InvalidTask(f"{kind} {value!r} has leading or trailing blanks")
    return value


def check_priority(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -32768 <= value <= 32767:
        raise InvalidTask(f"priority must be an integer in -32768..32767, got {value!r}")
    return value


def check_key(kind: str, value: object, limit: int = MAX_KEY_LENGTH) -> str | None:
    """A biz_id, unique_key, ordering_key or trace_id: a string PostgreSQL will store (no NUL
    byte, no lone surrogate) of at most ``limit`` characters, or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidTask(f"{kind} must be a string, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidTask(f"{kind} is {len(value)} characters long; the limit is {limit}")
    if "\x00" in value:
        raise InvalidTask(f"{kind} contains a NUL character")
    if _SURROGATE.search(value):
        raise InvalidTask(f"{kind} contains a lone surrogate (not valid Unicode)")
    return value


# What the (ASCII-only) encoder writes for NUL and for any UTF-16 surrogate: the cheap test
# that sends the rare payload through the exact walk below.
_SUSPECT = re.compile(r"\\u(?:0000|d[89a-f])")


def _unstorable(value: JSON) -> str | None:
    """Where a payload holds a string jsonb refuses ("\\u0000", a lone surrogate)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "a NUL character (\\u0000)"
            if _SURROGATE.search(item):
                return "a lone surrogate (not valid Unicode)"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None


_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def encode_payload(payload: JSON, max_bytes: int) -> str:
    """Serialise a payload to JSON text, enforcing the size limit before anything is written."""
    try:
        text = _ENCODE(payload)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
    if "\\u" in text and _SUSPECT.search(text):
        problem = _unstorable(payload)
        if problem:
            raise PayloadError(f"payload contains {problem}, which PostgreSQL cannot store")
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
    limits: FlowLimits | None = None
    """Cluster-wide flow control declared in code (``taskq limits set`` overrides it)."""


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """Flow control of one task type: a cluster-wide running cap, a rate of attempt starts
    (token bucket of ``burst`` tokens), a running cap per ``concurrency_key``, and fair
    (round-robin) claiming across keys."""

    max_running: int | None = None
    max_running_per_key: int | None = None
    rate: str | None = None
    """As written: ``"20/s"``, ``"100/m"``, ``"500/h"``."""
    burst: float | None = None
    """Tokens the bucket holds; default: one second's worth of the rate, at least 1."""
    fair: bool = False

    @property
    def rate_per_second(self) -> float | None:
        return parse_rate(self.rate) if self.rate is not None else None

    @property
    def effective_burst(self) -> float | None:
        per_second = self.rate_per_second
        if per_second is None:
            return None
        return float(self.burst) if self.burst is not None else max(1.0, round(per_second))

    @property
    def any(self) -> bool:
        return bool(
            self.max_running or self.max_running_per_key or self.rate is not None or self.fair
        )


def held_by_limits(row: Mapping[str, Any]) -> int:
    """How many due tasks of a limited type wait because a limit binds right now (its cap is
    full or its bucket is empty), from a ``limits_list`` row; 0 when they wait only for free
    worker slots."""
    waiting = int(row["waiting"])
    if not waiting:
        return 0
    if row["max_running"] is not None and row["running"] >= row["max_running"]:
        return waiting
    if row["tokens"] is not None and row["tokens"] < 1:
        return waiting
    return 0


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}


def parse_rate(text: str) -> float:
    """``"20/s"`` -> 20.0 starts per second; ``/m`` and ``/h`` too."""
    found = _RATE.match(text) if isinstance(text, str) else None
    if not found:
        raise InvalidTask(f"rate must look like 20/s, 100/m or 500/h, got {text!r}")
    count = float(found.group(1))
    if count <= 0:
        raise InvalidTask(f"rate must be positive, got {text!r}")
    return count / _PER.get(found.group(2), 3600.0)


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
    capped: bool = False
    """Its type has a running cap: finishing it frees a cluster-wide slot (wake a claimer)."""

    traceparent: str | None = None
    """The W3C trace context of the enqueue (OpenTelemetry): the attempt span's parent."""


class Claimed(list[ClaimedTask]):
    """The tasks one claim took, and ``held_for``: seconds until a rate-limited type that
    still has due work gets its next token (None: nothing is waiting on a rate)."""

    held_for: float | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    """What a failure update did to the row (returned by the guarded statement)."""

    status: Status
    retry_count: int
    next_retry_time: dt.datetime | None
