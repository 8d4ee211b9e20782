"""The Isolator: runs tasks marked isolate one at a time, with nothing else in the process.

A task is marked isolate when the process it ran in died while it ran beside other attempts
(the reaper's crash judgement, ``reap_attempts`` in sql/queries/finish.sql): nobody knows
which of them killed the process, so none is charged, and each must next run alone, where a
crash can only be its own (then the reaper charges it a retry, and a poison task ends in
DEAD_LETTER without taking its neighbours along). The normal claims never take an isolate
row (``taskq.claim_batch_v3``).

One pass (every poll interval, at once again after a pass that ran one):

1. ask the database whether any of this worker's queues has an isolate row of its types
   runnable now (``isolated_due``: an index that is empty while nothing has crashed, so the
   look is free when there is nothing to do);
2. close ``gate``: every claimer of the process stops claiming (a round already out finishes:
   the isolator takes each claimer's round lock once);
3. wait until every claimer is idle and the completer has written every outcome (a finished
   attempt whose outcome is not written is still PROCESSING, and would count as a neighbour);
   sync threads that overran their timeout still run: then give up this pass;
4. one claimer claims one isolate row (``claim_isolated``) and runs it; wait until it has
   finished and its outcome is written;
5. open the gate and wake the claimers.

The cost: while an isolated task is due, a process stops claiming until its running attempts
have finished. Isolate rows exist only after a crash, so this is rare; several processes may
empty themselves for the same row, and all but one then claim nothing and carry on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq.backoff import jittered
from taskq.db import store
from taskq.model import ClaimedTask
from taskq.service import PeriodicService
from taskq.worker.claimer import Claimer
from taskq.worker.completer import Completer

log = structlog.get_logger("taskq.worker.isolator")


class Isolator(PeriodicService):
    name = "isolator"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        task_types: Sequence[str],
        completer: Completer,
        interval_seconds: float,
        threads_busy: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__(interval_seconds=interval_seconds, jitter=0.2)
        self._pool = pool
        self._task_types = list(task_types)
        self._completer = completer
        self._threads_busy = threads_busy
        self.claimers: Mapping[str, Claimer] = {}
        self.gate = asyncio.Event()
        """Set while the claimers may claim; cleared while the process is emptied."""
        self.gate.set()
        self.isolated = 0  # isolated attempts run

    def delay_after(self, result: Any) -> float:
        return 0.0 if result is not None else jittered(self.interval_seconds, self.jitter)

    async def run_once(self) -> ClaimedTask | None:
        """One pass: run one isolated task alone if one is due; return it (None: none ran)."""
        if not self.claimers:
            return None
        async with self._pool.connection() as conn:
            due = await store.isolated_due(
                conn, queues=list(self.claimers), task_types=self._task_types
            )
        if not due:
            return None
        self.gate.clear()
        try:
            for claimer in self.claimers.values():
                async with claimer.round:
                    pass  # a round that started before the gate closed has ended
            for claimer in self.claimers.values():
                await claimer.idle.wait()
            await self._completer.drain()
            if self._threads_busy():
                log.info("isolation_deferred", reason="sync threads past their timeout still run")
                return None
            for queue in due:
                claimer = self.claimers[queue]
                task = await claimer.claim_isolated()
                if task is None:
                    continue
                self.isolated += 1
                await claimer.idle.wait()
                await self._completer.drain()
                return task
            return None
        finally:
            self.gate.set()
            for claimer in self.claimers.values():
                claimer.wake()
