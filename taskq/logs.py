"""structlog configuration: JSON lines in production, readable colour on a terminal.

One event per state transition, named in the past tense (``task_claimed``, ``task_succeeded``,
``task_failed``, ``task_dead_lettered``, ``lease_lost``...), with a fixed set of keys. Payloads
are never logged.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "json", "console"]
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


_enabled_from = logging.DEBUG  # until configured, structlog prints everything


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
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if use_json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
