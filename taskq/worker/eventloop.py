"""Which event loop ``taskq worker`` runs on: uvloop when it is installed (``taskq[speed]``),
else asyncio's own.

A drain worker steps through the event loop for every attempt: a handle and a ``_run_once``
pass per step, the selector between round trips. uvloop does that work in C: 4-9 % less worker
CPU per task in drains (the optimisation table in bench/FINDINGS.md). It stays an extra: the
worker needs nothing from it, and ``--event-loop asyncio`` turns it off where a handler library
insists on asyncio's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from taskq.errors import ConfigError

EventLoop = Literal["auto", "asyncio", "uvloop"]
CHOICES: tuple[EventLoop, ...] = ("auto", "asyncio", "uvloop")

T = TypeVar("T")


def loop_factory(choice: EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for ``asyncio.Runner``; None means asyncio's default loop.

    ``auto``: uvloop if it can be imported. ``uvloop`` without it installed is a
    ``ConfigError``, not a silent fall-back: whoever asked for it expects it."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                "--event-loop uvloop: uvloop is not installed (pip install 'taskq[speed]')"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: the package the running loop comes from (for the logs)."""
    return type(loop).__module__.partition(".")[0]


def run(main: Coroutine[Any, Any, T], factory: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """``asyncio.run(main)`` on a loop from ``factory`` (None: asyncio's own)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
