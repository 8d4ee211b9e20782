"""The Elector: one worker at a time holds the ``maintenance`` lease.

Work that must have exactly one doer — backlog and database gauges (exported only by the
leader, so sum() across workers is right), the protection-level evaluator, pruning — runs
only while ``is_leader``. The lease is a row with an expiry, renewed by its holder and taken
over by anyone once it expires; when a renewal fails the worker steps down at once, since it
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

from taskq import store
from taskq.backoff import jittered

log = structlog.get_logger("taskq.leader")

LEASE = "maintenance"


class Elector:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        worker_id: str,
        ttl_seconds: float = 15.0,
        renew_seconds: float = 5.0,
    ) -> None:
        self._pool = pool
        self._worker_id = worker_id
        self._ttl = ttl_seconds
        self._renew = renew_seconds
        self.is_leader = False
        self.elected = asyncio.Event()

    async def run_once(self) -> bool:
        try:
            async with self._pool.connection() as conn:
                won = await store.leader_elect(
                    conn, name=LEASE, worker_id=self._worker_id, ttl_seconds=self._ttl
                )
        except Exception:  # cannot know: step down (the lease expires on its own)
            won = False
        if won != self.is_leader:
            log.info("leader_elected" if won else "leader_resigned", worker_id=self._worker_id)
        self.is_leader = won
        if won:
            self.elected.set()
        else:
            self.elected.clear()
        return won

    async def run(self) -> None:
        while True:
            await self.run_once()
            await asyncio.sleep(jittered(self._renew, 0.1))

    async def resign(self) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with self._pool.connection() as conn:
                await store.leader_resign(conn, name=LEASE, worker_id=self._worker_id)
        except Exception:  # the lease expires on its own
            log.debug("leader_resign_failed", exc_info=True)
