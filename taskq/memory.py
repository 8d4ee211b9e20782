"""The memory guard: stop claiming while the process is above a resident-memory limit.

Claiming is already bounded by free slots; this bounds what the handlers themselves hold (big
payloads, leaks). Work is never dropped: over the limit the worker just claims nothing new
until in-flight tasks finish and memory comes back down.
"""

from __future__ import annotations

import os

import structlog

log = structlog.get_logger("taskq.memory")


def rss_bytes() -> int | None:
    """Current resident set size of this process (Linux), or None when unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


class MemoryGuard:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.over = False

    def __call__(self) -> bool:
        """True when claiming is allowed."""
        rss = rss_bytes()
        over = rss is not None and rss >= self.limit_bytes
        if over != self.over:
            self.over = over
            if over:
                log.warning("memory_limit_reached", rss_bytes=rss, limit_bytes=self.limit_bytes)
            else:
                log.info("memory_limit_cleared", rss_bytes=rss, limit_bytes=self.limit_bytes)
        return not over


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
