"""How one attempt ended, as the executor saw it; the completer turns it into a guarded
transition. Constructors make the valid combinations the only ones you can write."""

from __future__ import annotations

import threading
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
        return _fit(message)
    shape = _shape(exc)
    if shape is None:
        return _fit(_format(exc))
    text = _DESCRIBED.get(shape)
    if text is None:
        text = _fit(_format(exc))
        with _DESCRIBED_LOCK:
            if len(_DESCRIBED) >= _DESCRIBED_MAX:
                _DESCRIBED.pop(next(iter(_DESCRIBED)), None)  # the oldest entry
            _DESCRIBED[shape] = text
    return text


def _format(exc: BaseException) -> str:
    message = _safe_str(exc)
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.format_exception(exc)
    tail = "".join(frames[-12:]) if frames else ""
    return f"{head}\n{tail}" if tail else head


def _fit(text: str) -> str:
    text = text.replace("\x00", "")
    if len(text) > MAX_ERROR_CHARS:
        # Keep the head (type and message) and the innermost frames; drop the middle.
        keep_tail = MAX_ERROR_CHARS - 1024
        text = text[:1000] + "\n... (truncated) ...\n" + text[-keep_tail:]
    return text


def _safe_str(exc: BaseException) -> str:
    """``str(exc)``, or what ``traceback`` prints when the exception's ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


# Formatting a traceback is most of what a failed attempt costs the worker (~0.2 ms here:
# Python 3.11 reads each frame's column positions and parses source lines for the carets), and
# a failure storm is thousands of attempts failing the same way. So the text is kept for the
# exception's *shape*: the type, message and code position of every frame, along the chain
# format_exception follows. Same shape, same text. Bounded: oldest entry out first.
_DESCRIBED: dict[tuple[object, ...], str] = {}
_DESCRIBED_MAX = 128
_DESCRIBED_LOCK = threading.Lock()
_SHAPE_MAX_MESSAGE = 1000
_SHAPE_MAX_LINKS = 8


def _shape(exc: BaseException) -> tuple[object, ...] | None:
    """What ``_format(exc)``'s text depends on, or None when that is not this simple: an
    exception group, notes, a SyntaxError (printed from its attributes), a long message or
    chain, a message that cannot be read."""
    parts: list[object] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None:
        if (
            len(parts) >= _SHAPE_MAX_LINKS
            or id(current) in seen
            or isinstance(current, (BaseExceptionGroup, SyntaxError))
            or getattr(current, "__notes__", None) is not None
        ):
            return None
        seen.add(id(current))
        try:
            message = str(current)
        except Exception:
            return None
        if len(message) > _SHAPE_MAX_MESSAGE:
            return None
        kind = type(current)
        frames = []
        tb = current.__traceback__
        while tb is not None:
            frames.append((tb.tb_frame.f_code, tb.tb_lasti))
            tb = tb.tb_next
        # The link format_exception prints next: the cause, else the unsuppressed context.
        if current.__cause__ is not None:
            link, current = "cause", current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            link, current = "context", current.__context__
        else:
            link, current = "", None
        parts.append((kind, message, tuple(frames), link))
    return tuple(parts)
