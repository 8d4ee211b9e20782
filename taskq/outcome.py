"""How one attempt ended, as the executor saw it; the completer turns it into a guarded
transition. Constructors make the valid combinations the only ones you can write."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from enum import StrEnum

from taskq.model import ClaimedTask

MAX_ERROR_CHARS = 4000


class Kind(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"  # retry with backoff, or DEAD_LETTER when retries are exhausted
    RETRY = "retry"  # taskq.Retry(after=...): retry at a chosen time
    DEAD = "dead"  # taskq.Permanent: straight to DEAD_LETTER
    COMMITTED = "committed"  # idempotent: SUCCESS already committed with the business writes
    DUPLICATE = "duplicate"  # idempotent: the business key was done already; completed unrun
    RELEASED = "released"  # given back unrun or interrupted, uncharged (shutdown, connection)
    LOST = "lost"  # idempotent: the commit found the attempt taken away; rolled back
    CANCELLED = "cancelled"  # asked to abort (taskq cancel): final, no retry, no dead letter


@dataclass(slots=True)
class Outcome:
    """Treat as read-only (not frozen: built once per task on the hot path, see ClaimedTask)."""

    task: ClaimedTask
    kind: Kind
    duration_seconds: float
    error: str | None = None
    error_type: str | None = None
    after_seconds: float | None = None

    @classmethod
    def success(cls, task: ClaimedTask, duration: float) -> Outcome:
        return cls(task, Kind.SUCCESS, duration)

    @classmethod
    def committed(cls, task: ClaimedTask, duration: float, *, duplicate: bool) -> Outcome:
        return cls(task, Kind.DUPLICATE if duplicate else Kind.COMMITTED, duration)

    @classmethod
    def failure(
        cls, task: ClaimedTask, duration: float, exc: BaseException | None, message: str = ""
    ) -> Outcome:
        return cls(task, Kind.FAILURE, duration, describe(exc, message), _type(exc, message))

    @classmethod
    def retry(cls, task: ClaimedTask, duration: float, exc: BaseException, after: float) -> Outcome:
        return cls(task, Kind.RETRY, duration, describe(exc), _type(exc), after)

    @classmethod
    def released(cls, task: ClaimedTask, duration: float, reason: str) -> Outcome:
        """The attempt can no longer run and is given back without charging it."""
        return cls(task, Kind.RELEASED, duration, reason, reason.split(":", 1)[0])

    @classmethod
    def lost(cls, task: ClaimedTask, duration: float) -> Outcome:
        return cls(task, Kind.LOST, duration)

    @classmethod
    def cancelled(cls, task: ClaimedTask, duration: float, why: str) -> Outcome:
        return cls(task, Kind.CANCELLED, duration, why, "Cancelled")

    @classmethod
    def dead(cls, task: ClaimedTask, duration: float, exc: BaseException) -> Outcome:
        return cls(task, Kind.DEAD, duration, describe(exc), _type(exc))


def _type(exc: BaseException | None, message: str = "") -> str:
    if exc is None:
        return message.split(":", 1)[0] or "Error"
    return type(exc).__name__


def describe(exc: BaseException | None, message: str = "") -> str:
    """``Type: message`` plus the innermost traceback frames, trimmed to fit ``last_error``.

    NUL characters are removed: PostgreSQL text cannot hold them, and an error message must
    never be the reason a failure cannot be recorded.
    """
    if exc is None:
        text = message
    else:
        head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        frames = traceback.format_exception(exc)
        tail = "".join(frames[-12:]) if frames else ""
        text = f"{head}\n{tail}" if tail else head
    text = text.replace("\x00", "")
    if len(text) > MAX_ERROR_CHARS:
        # Keep the head (type and message) and the innermost frames; drop the middle.
        keep_tail = MAX_ERROR_CHARS - 1024
        text = text[:1000] + "\n... (truncated) ...\n" + text[-keep_tail:]
    return text
