"""Progress reports from handlers: stored on the row, published on ``taskq_progress``.

A handler may call ``ctx.progress()`` thousands of times in a tight loop, from the event loop
or from a worker thread. The reporter keeps only the latest value and writes at most one row
update per ``min_interval_seconds`` (the trailing value is always written), so progress costs
the database a few statements per second per task, never one per call. Reporting never blocks
the handler.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("taskq.progress")


class ProgressReporter:
    """Coalesces and throttles one attempt's progress writes."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        write: Callable[[str], Awaitable[bool]],
        *,
        min_interval_seconds: float = 0.25,
    ) -> None:
        self._loop = loop
        self._write = write
        self._min_interval = min_interval_seconds
        self._lock = threading.Lock()
        self._latest: str | None = None
        self._writer: asyncio.Task[None] | None = None
        self._flushing = False
        self._nudge = asyncio.Event()
        self.lease_lost = False

    def submit(self, value_json: str) -> None:
        """Record the newest value; callable from any thread."""
        with self._lock:
            self._latest = value_json
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._kick()
        else:
            self._loop.call_soon_threadsafe(self._kick)

    def _kick(self) -> None:
        if self._writer is None:
            self._writer = self._loop.create_task(self._drain(), name="taskq-progress")

    def _take(self) -> str | None:
        with self._lock:
            value, self._latest = self._latest, None
        return value

    async def _drain(self) -> None:
        try:
            while (value := self._take()) is not None:
                try:
                    if not await self._write(value):
                        self.lease_lost = True
                        return
                except Exception:  # loop boundary: progress is best effort, the task is not
                    log.warning("progress_write_failed", exc_info=True)
                if not self._flushing:
                    self._nudge.clear()
                    try:
                        async with asyncio.timeout(self._min_interval):
                            await self._nudge.wait()  # flush() cuts the throttle short
                    except TimeoutError:
                        pass
        finally:
            self._writer = None

    async def flush(self) -> None:
        """Write the last reported value now (before the attempt's final status)."""
        self._flushing = True
        self._nudge.set()
        writer = self._writer
        if writer is not None:
            await writer
        if self._latest is not None:
            self._kick()
            if self._writer is not None:
                await self._writer

    def cancel(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
