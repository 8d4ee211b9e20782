"""structlog configuration: JSON lines in production, readable colour on a terminal.

One event per state transition, named in the past tense (``task_claimed``, ``task_succeeded``,
``task_failed``, ``task_dead_lettered``, ``lease_lost``...), with a fixed set of keys. Payloads
are never logged.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

import structlog

if TYPE_CHECKING:
    from taskq.model import ClaimedTask

LogFormat = Literal["auto", "json", "console"]
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


_enabled_from = logging.DEBUG  # until configured, structlog prints everything

TASK_FIELDS: ContextVar[tuple[ClaimedTask, str, bool] | None] = ContextVar(
    "taskq_task_fields", default=None
)
"""The running attempt: its task, the worker's id, and whether its payload is logged
(``--log-payloads``); set once per attempt by the executor. The keys (task_id, task_type,
biz_id, trace_id, attempt, worker_id) are built from it only when an event is logged: one
variable rather than one per key (structlog's bound_contextvars, six per task, was a measurable
share of a busy worker's time), and no dict per attempt for the many that log nothing."""


def merge_task_fields(
    logger: Any, method_name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """structlog processor: adds the running task's keys to every event logged inside it,
    including the handler's own. Add it to your chain if you configure structlog yourself."""
    attempt = TASK_FIELDS.get()
    if attempt is not None:
        task, worker_id, with_payload = attempt
        event_dict.setdefault("task_id", task.id)
        event_dict.setdefault("task_type", task.task_type)
        event_dict.setdefault("biz_id", task.biz_id)
        event_dict.setdefault("trace_id", task.trace_id)
        event_dict.setdefault("attempt", task.retry_count)
        event_dict.setdefault("worker_id", worker_id)
        if with_payload:
            event_dict.setdefault("payload", task.payload)
    return event_dict


def enabled(level: int) -> bool:
    """Would an event at ``level`` be logged? Lets the hot path skip building the fields of an
    event that the filtering logger would drop anyway."""
    return level >= _enabled_from


def configure(fmt: LogFormat = "auto", level: str = "info") -> None:
    """Configure structlog for the process (called once by the CLI)."""
    global _enabled_from
    if level not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    _enabled_from = _LEVELS[level]
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    # psycopg_pool reports every failed reconnection attempt through stdlib logging; taskq's
    # own components log an outage once, so keep the pool quiet unless something is broken.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            merge_task_fields,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if use_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
