"""The memory guard: stop claiming while the process is above a resident-memory limit.

Claiming is already bounded by free slots; this bounds what the handlers themselves hold (big
payloads, leaks). Work is never dropped: over the limit the worker claims nothing new until
in-flight tasks finish and memory comes back down.

Memory that does not come back once nothing is in flight never will by waiting (a leak, a
fragmented heap, a cache a handler filled): the worker is alive and heart-beating but useless.
So the guard does two things about it. The heartbeat reports "not claiming, since when, why",
which ``taskq health`` and ``taskq stats`` show (health fails once it has lasted longer than the
worker's lease). And after ``grace_seconds`` over the limit with nothing in flight, the guard
gives up: the worker stops (nothing to drain or give back), unregisters and exits with code 75
(EX_TEMPFAIL), so that systemd (``Restart=always``/``on-failure``), the ``--processes``
supervisor or a container runtime starts a fresh process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import structlog

from taskq.service import PeriodicService

log = structlog.get_logger("taskq.worker.memory")

EXIT_MEMORY = 75
"""The exit code of a worker whose memory never came back (EX_TEMPFAIL: try again)."""


def rss_bytes() -> int | None:
    """Current resident set size of this process (Linux), or None when unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


class MemoryGuard(PeriodicService):
    """Reads the resident memory every ``interval_seconds``; claimers call the guard (cheap:
    no /proc read per claim) to ask whether they may claim."""

    name = "memory"

    def __init__(
        self,
        limit_bytes: int,
        *,
        grace_seconds: float = 60.0,
        interval_seconds: float = 1.0,
        busy: Callable[[], bool] = lambda: False,
        on_give_up: Callable[[], None] | None = None,
        read: Callable[[], int | None] = lambda: rss_bytes(),
    ) -> None:
        super().__init__(interval_seconds=interval_seconds, jitter=0.0)
        self.limit_bytes = limit_bytes
        self.grace_seconds = grace_seconds
        self._busy = busy
        self._on_give_up = on_give_up
        self._read = read
        self.over = False
        self.rss: int | None = None
        self.gave_up = False
        self._stuck_since: float | None = None

    def __call__(self) -> bool:
        """True when claiming is allowed."""
        return not self.over

    @property
    def reason(self) -> str | None:
        """Why the worker is not claiming (for its heartbeat), or None."""
        if not self.over:
            return None
        return f"memory limit: resident {self.rss} bytes >= --max-memory {self.limit_bytes} bytes"

    async def run_once(self) -> bool:
        """Read the resident memory; give up once it stayed over the limit for the grace with
        nothing in flight. Returns whether claiming is stopped."""
        rss = self.rss = self._read()
        over = rss is not None and rss >= self.limit_bytes
        if over != self.over:
            self.over = over
            if over:
                log.warning("memory_limit_reached", rss_bytes=rss, limit_bytes=self.limit_bytes)
            else:
                log.info("memory_limit_cleared", rss_bytes=rss, limit_bytes=self.limit_bytes)
        now = time.monotonic()
        if not over or self._busy():
            self._stuck_since = None  # finishing tasks may still bring it down
        elif self._stuck_since is None:
            self._stuck_since = now
        elif now - self._stuck_since >= self.grace_seconds and not self.gave_up:
            self.gave_up = True
            log.error(
                "memory_limit_exit",
                rss_bytes=rss,
                limit_bytes=self.limit_bytes,
                grace_seconds=self.grace_seconds,
                exit_code=EXIT_MEMORY,
            )
            if self._on_give_up is not None:
                self._on_give_up()
        return over


def parse_size(text: str) -> int:
    """``"512MB"``, ``"2G"``, ``"1048576"`` -> bytes (binary units)."""
    value = text.strip().upper().removesuffix("B")
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    factor = 1
    if value and value[-1] in units:
        factor = units[value[-1]]
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M or 2G)") from None
    if number <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    return int(number * factor)
