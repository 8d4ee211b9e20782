"""The Reaper: rescues attempts whose worker died or that overran their timeout.

A maintenance service: it runs on the leader only (the ``maintenance`` lease, see
``leader.Elector``), so adding workers adds no load. A pass is still safe to run concurrently
with another (``taskq reap`` by hand, or the brief overlap of a lease hand-over): its rows are
locked with SKIP LOCKED and every rescue is a guarded statement. ``taskq reap`` runs one pass
by hand. The rescue is a move out of PROCESSING, so it is written by the completer module's
``reap`` (one writer per transition).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq.db.connection import unavailable
from taskq.service import Leadership, PeriodicService
from taskq.settings import CRASH_LIMIT
from taskq.worker import completer
from taskq.worker.metrics import Metrics

# The log event and metric outcome of a rescue, by the status it ends in (else: rescued).
# PENDING: the attempt died beside others in a crashed process; not charged, it runs alone next.
_REAPED = {
    "DEAD_LETTER": ("task_dead_lettered", "dead_lettered"),
    "CANCELLED": ("task_cancelled", "cancelled"),
    "PENDING": ("task_isolated", "released"),
}

log = structlog.get_logger("taskq.worker.reaper")


@dataclass(frozen=True, slots=True)
class ReapResult:
    rescued: list[dict[str, Any]] = field(default_factory=list)
    forgotten_workers: list[str] = field(default_factory=list)


class Reaper(PeriodicService):
    name = "reaper"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        interval_seconds: float,
        grace_seconds: float,
        orphan_after_seconds: float,
        crash_limit: int = CRASH_LIMIT,
        metrics: Metrics | None = None,
        leader: Leadership | None = None,
    ) -> None:
        super().__init__(interval_seconds=interval_seconds, jitter=0.2, leader=leader)
        self._pool = pool
        self._metrics = metrics
        self._grace = grace_seconds
        self._orphan_after = orphan_after_seconds
        self._crash_limit = crash_limit

    async def run_once(self) -> ReapResult:
        """One pass."""
        async with self._pool.connection() as conn:
            rescued, forgotten = await completer.reap(
                conn,
                grace_seconds=self._grace,
                orphan_after_seconds=self._orphan_after,
                crash_limit=self._crash_limit,
            )
        for row in rescued:
            event, outcome = _REAPED.get(row["status"], ("task_reaped", "rescued"))
            if self._metrics is not None:
                self._metrics.counted(row["queue"], row["task_type"], outcome)
            log.warning(
                event,
                task_id=row["id"],
                task_type=row["task_type"],
                queue=row["queue"],
                worker_id=row["worker_id"],
                retry_count=row["retry_count"],
                crash_count=row["crash_count"],
                reason=(row["last_error"] or "").split(":", 1)[0],
            )
        for worker_id in forgotten:
            log.info("worker_forgotten", worker_id=worker_id)
        return ReapResult(rescued, forgotten)


def reap_once(dsn: str, *, grace_seconds: float, orphan_after_seconds: float) -> ReapResult:
    """One pass outside a worker (``taskq reap``)."""

    async def one_pass() -> ReapResult:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            dsn, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
        )
        try:
            await pool.open(wait=True, timeout=10)
        except Exception as exc:
            await pool.close()
            raise unavailable(exc) from None
        try:
            reaper = Reaper(
                pool,
                interval_seconds=0,
                grace_seconds=grace_seconds,
                orphan_after_seconds=orphan_after_seconds,
            )
            return await reaper.run_once()
        finally:
            await pool.close()

    return asyncio.run(one_pass())
