"""The Elector: one worker at a time holds the ``maintenance`` lease.

This lease is the one leadership mechanism of taskq. Every maintenance service — the reaper,
the scheduler, the backlog and database gauges (exported only by the leader, so sum() across
workers is right), the protection-level evaluator, pruning — is a ``PeriodicService`` with
``leader=`` this elector, and runs only while ``is_leader``. Leadership saves work; it never
carries correctness (every rescue is guarded, every tick has its unique row), so the short
overlap of a hand-over is harmless.

The lease is a row with an expiry, renewed by its holder and taken over by anyone once it
expires; when a renewal fails the worker steps down at once, since it
cannot know whether it still holds the lease.

    follower --(row missing or expired: INSERT/UPDATE wins)--> leader
    leader   --(renewal matches its own row)--> leader
    leader   --(renewal fails or errors)--> follower
    leader   --(shutdown: DELETE own row)--> gone
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq.db import store
from taskq.service import PeriodicService

log = structlog.get_logger("taskq.worker.leader")

LEASE = "maintenance"


class Elector(PeriodicService):
    """Holds or seeks the lease every ``renew_seconds``; the leader gate of every maintenance
    service reads ``is_leader`` / ``elected``."""

    name = "elector"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        worker_id: str,
        ttl_seconds: float = 15.0,
        renew_seconds: float = 5.0,
    ) -> None:
        super().__init__(interval_seconds=renew_seconds, jitter=0.1)
        self._pool = pool
        self._worker_id = worker_id
        self._ttl = ttl_seconds
        self.is_leader = False
        self.elected = asyncio.Event()

    async def run_once(self) -> bool:
        try:
            async with self._pool.connection() as conn:
                won = await store.leader_elect(
                    conn, name=LEASE, worker_id=self._worker_id, ttl_seconds=self._ttl
                )
        except Exception:  # cannot know: step down (the lease expires on its own)
            self._set(False)
            raise
        self._set(won)
        return won

    def _set(self, won: bool) -> None:
        if won != self.is_leader:
            log.info("leader_elected" if won else "leader_resigned", worker_id=self._worker_id)
        self.is_leader = won
        if won:
            self.elected.set()
        else:
            self.elected.clear()

    async def resign(self) -> None:
        if not self.is_leader:
            return
        self._set(False)
        try:
            async with self._pool.connection() as conn:
                await store.leader_resign(conn, name=LEASE, worker_id=self._worker_id)
        except Exception:  # the lease expires on its own
            log.debug("leader_resign_failed", exc_info=True)
