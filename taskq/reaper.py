"""The Reaper: rescues attempts whose worker died or that overran their timeout.

Every worker runs it; an advisory transaction lock lets one pass at a time do the work, so
adding workers adds no load. ``taskq reap`` runs one pass by hand.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import store
from taskq.backoff import jittered
from taskq.db import ConnectionError_, first_line, unavailable
from taskq.metrics import Metrics

log = structlog.get_logger("taskq.reaper")


@dataclass(frozen=True, slots=True)
class ReapResult:
    rescued: list[dict[str, Any]] = field(default_factory=list)
    forgotten_workers: list[str] = field(default_factory=list)


class Reaper:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        interval_seconds: float,
        grace_seconds: float,
        orphan_after_seconds: float,
        metrics: Metrics | None = None,
    ) -> None:
        self._pool = pool
        self._metrics = metrics
        self._interval = interval_seconds
        self._grace = grace_seconds
        self._orphan_after = orphan_after_seconds
        self.passes = 0

    async def run_once(self) -> ReapResult | None:
        """One pass; None when another worker's pass was running."""
        async with self._pool.connection() as conn:
            result = await store.reap(
                conn, grace_seconds=self._grace, orphan_after_seconds=self._orphan_after
            )
        if result is None:
            return None
        rescued, forgotten = result
        self.passes += 1
        for row in rescued:
            event = "task_dead_lettered" if row["status"] == "DEAD_LETTER" else "task_reaped"
            if self._metrics is not None:
                outcome = "dead_lettered" if row["status"] == "DEAD_LETTER" else "rescued"
                self._metrics.counted(row["queue"], row["task_type"], outcome)
            log.warning(
                event,
                task_id=row["id"],
                task_type=row["task_type"],
                queue=row["queue"],
                worker_id=row["worker_id"],
                retry_count=row["retry_count"],
                reason=(row["last_error"] or "").split(":", 1)[0],
            )
        for worker_id in forgotten:
            log.info("worker_forgotten", worker_id=worker_id)
        return ReapResult(rescued, forgotten)

    async def run(self) -> None:
        outage_logged = False
        while True:
            await asyncio.sleep(jittered(self._interval))
            try:
                await self.run_once()
            except ConnectionError_ as exc:
                if not outage_logged:
                    log.warning("reaper_unavailable", error=first_line(exc))
                    outage_logged = True
                continue
            except Exception:  # loop boundary
                log.exception("reaper_failed")
                continue
            outage_logged = False


def reap_once(dsn: str, *, grace_seconds: float, orphan_after_seconds: float) -> ReapResult | None:
    """One pass outside a worker (``taskq reap``)."""

    async def one_pass() -> ReapResult | None:
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
