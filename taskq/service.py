"""The shape of every background loop of a worker: ``Service`` and ``PeriodicService``.

Each loop used to carry its own "log the outage once" flag, its own sleep and its own idea of
who may run it. They live here once:

- ``Outage`` logs a database outage once (``service_unavailable``) and its end once
  (``service_resumed``, with how long it lasted), whatever number of retries lies between.
  The heartbeat thread uses it too.
- ``PeriodicService.run()`` calls ``run_once()`` every ``interval_seconds`` (jittered, so
  workers do not act in lockstep), backs off on connection errors, logs anything else and
  keeps going (a loop boundary), and wakes early on ``wake()``.
- The leader gate: a service given ``leader=`` runs only while this worker holds the
  maintenance lease (``taskq.leaders``, see ``leader.Elector``). It is the one leadership
  mechanism for all maintenance: the reaper, the scheduler, pruning, the protection evaluator
  and the queue-wide gauges.
- ``run_once()`` does one unit of work and returns; tests drive it directly against a real
  database without starting a worker.

``Service`` is for loops that are not a timer: the notifier (one LISTEN session per
``run_once``), the claimer (woken by NOTIFY, the poll and freed slots) and the completer (one
batch of outcomes per ``run_once``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import structlog

from taskq.backoff import Backoff, Cooldown, jittered
from taskq.db.connection import ConnectionError_, first_line
from taskq.errors import DatabaseUnavailable

log = structlog.get_logger("taskq.service")


OUTAGE_ERRORS = (*ConnectionError_, DatabaseUnavailable)
"""What counts as "the database is away" rather than a bug: logged once, retried with backoff."""


class Leadership(Protocol):
    """What the leader gate needs from the elector."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def elected(self) -> asyncio.Event: ...


class Outage:
    """Logs an outage once when it starts and once when it ends."""

    def __init__(self, service: str, **fields: Any) -> None:
        self.service = service
        self._fields = fields
        self._since: float | None = None
        self.outages = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> None:
        if self._since is not None:
            return
        self._since = time.monotonic()
        self.outages += 1
        log.warning(
            "service_unavailable", service=self.service, error=first_line(exc), **self._fields
        )

    def recovered(self) -> None:
        if self._since is None:
            return
        lasted = time.monotonic() - self._since
        self._since = None
        log.info(
            "service_resumed",
            service=self.service,
            outage_seconds=round(lasted, 3),
            **self._fields,
        )


class Service:
    """A named background loop with one outage log. Subclasses implement ``run``."""

    name = "service"

    def __init__(self, name: str | None = None, **log_fields: Any) -> None:
        if name is not None:
            self.name = name
        self.outage = Outage(self.name, **log_fields)

    async def run(self) -> None:
        raise NotImplementedError


class PeriodicService(Service):
    """``run_once()`` every ``interval_seconds`` (jittered), optionally on the leader only."""

    def __init__(
        self,
        name: str | None = None,
        *,
        interval_seconds: float,
        jitter: float = 0.1,
        leader: Leadership | None = None,
        backoff_cap_seconds: float = 5.0,
        coalesce_seconds: float = 0.0,
        **log_fields: Any,
    ) -> None:
        super().__init__(name, **log_fields)
        self.interval_seconds = interval_seconds
        self.coalesce_seconds = coalesce_seconds
        """However many wake-ups arrive, runs start at least this far apart (a NOTIFY flood
        costs at most one run per this period)."""
        self._cooldown = Cooldown(coalesce_seconds, burst=1)  # a burst of 1: a fixed gap
        self.jitter = jitter
        self.leader = leader
        self._backoff = Backoff(initial=0.1, cap=max(0.1, backoff_cap_seconds))
        self._wake = asyncio.Event()
        self.runs = 0
        self.failures = 0

    async def run_once(self) -> Any:
        """One unit of work. Connection errors and bugs are handled by ``run``."""
        raise NotImplementedError

    def delay_after(self, result: Any) -> float:
        """How long to wait after a successful ``run_once`` (default: the jittered interval)."""
        return jittered(self.interval_seconds, self.jitter)

    async def on_follower(self) -> None:
        """Called when a leader-gated service finds it is not (or no longer) the leader."""

    async def on_error(self) -> None:
        """Called after ``run_once`` raised (e.g. to drop a connection the service keeps)."""

    def wake(self) -> None:
        """Cut the current wait short: run again now (a NOTIFY said something changed)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            if self.leader is not None and not self.leader.is_leader:
                await self.on_follower()
                await self.leader.elected.wait()
                continue  # re-check: the lease may have been lost again meanwhile
            gap = self._cooldown.wait_seconds()
            if gap > 0:
                await asyncio.sleep(gap)
            self._wake.clear()
            self._cooldown.take()
            try:
                result = await self.run_once()
            except OUTAGE_ERRORS as exc:
                self.failures += 1
                self.outage.failed(exc)
                await self.on_error()
                await self._wait(self._backoff.next_delay())
                continue
            except Exception:  # loop boundary: a bug must not kill the worker
                self.failures += 1
                log.exception("service_failed", service=self.name)
                await self.on_error()
                await self._wait(jittered(max(self.interval_seconds, 1.0), self.jitter))
                continue
            self.runs += 1
            self.outage.recovered()
            self._backoff.reset()
            await self._wait(self.delay_after(result))

    async def _wait(self, seconds: float) -> None:
        if self._wake.is_set():
            return
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self._wake.wait()
        except TimeoutError:
            pass


class Every(PeriodicService):
    """A ``PeriodicService`` around a coroutine function, for maintenance jobs that already
    have a ``run_once`` elsewhere (the protection evaluator, pruning)."""

    def __init__(self, name: str, job: Any, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._job = job

    async def run_once(self) -> Any:
        return await self._job()
