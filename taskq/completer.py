"""The Completer: turns attempt outcomes into guarded state transitions.

Outcomes that arrive together are written together: all successes in one
``mark_success_many`` statement, failures one guarded statement each. Under load this batches
naturally; when idle it adds no delay. A write that fails because the connection dropped is
retried with backoff until it lands, never dropped. A write that matches no row means the
attempt's lease was lost (the task was rescued and re-claimed elsewhere): logged, never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import logs, store
from taskq.backoff import Backoff
from taskq.db import ConnectionError_, first_line
from taskq.metrics import Metrics
from taskq.model import Finished, Status, TaskOptions
from taskq.outcome import Kind, Outcome

log = structlog.get_logger("taskq.completer")

MAX_BATCH = 1000


def task_fields(outcome: Outcome, worker_id: str) -> dict[str, Any]:
    t = outcome.task
    return {
        "task_id": t.id,
        "task_type": t.task_type,
        "queue": t.queue,
        "biz_id": t.biz_id,
        "trace_id": t.trace_id,
        "attempt": t.retry_count,
        "effective_id": str(t.effective_id),
        "worker_id": worker_id,
        "duration_ms": round(outcome.duration_seconds * 1000, 3),
    }


class Completer:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        options_for: Callable[[str], TaskOptions],
        *,
        worker_id: str,
        wake: Callable[[list[str]], None] | None = None,
        metrics: Metrics | None = None,
        breaker_threshold: int = 5,
        log_payloads: bool = False,
    ) -> None:
        self._log_payloads = log_payloads
        self._pool = pool
        self._wake = wake
        self._metrics = metrics
        self._breaker_threshold = breaker_threshold
        self._options_for = options_for
        self._worker_id = worker_id
        self._queue: asyncio.Queue[Outcome] = asyncio.Queue()
        self._backoff = Backoff(initial=0.05, cap=5.0)
        self._outage_logged = False

    def put(self, outcome: Outcome) -> None:
        self._queue.put_nowait(outcome)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def drain(self) -> None:
        """Return once every outcome put so far has been written (or found lost)."""
        await self._queue.join()

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write_until_done(self._already_written(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()
            # A finished task with an ordering key may have unblocked the next one of its key,
            # and no INSERT will NOTIFY about that: look again now that the write is done.
            keyed = {o.task.queue for o in batch if o.task.ordering_key is not None}
            if keyed and self._wake is not None:
                self._wake(sorted(keyed))

    def _already_written(self, batch: list[Outcome]) -> list[Outcome]:
        """Idempotent attempts committed their own SUCCESS: only log them. The rest."""
        rest = []
        for o in batch:
            if o.kind is Kind.COMMITTED:
                log.info("task_succeeded", in_transaction=True, **self._fields(o))
                self._count(o)
            elif o.kind is Kind.DUPLICATE:
                log.info("task_duplicate_skipped", **self._fields(o))
                self._count(o)
            else:
                rest.append(o)
        return rest

    async def _write_until_done(self, batch: list[Outcome]) -> None:
        remaining = batch
        retried = False
        while remaining:
            try:
                remaining = await self._write(remaining, retried=retried)
            except ConnectionError_ as exc:
                if not self._outage_logged:
                    log.warning("completion_delayed", error=first_line(exc), pending=len(remaining))
                    self._outage_logged = True
                retried = True
                await asyncio.sleep(self._backoff.next_delay())
            except Exception:  # loop boundary: a bug must not kill the worker
                log.exception("completion_failed", tasks=[o.task.id for o in remaining])
                return
        if self._outage_logged:
            log.info("completion_resumed")
            self._outage_logged = False
        self._backoff.reset()

    async def _write(self, batch: list[Outcome], *, retried: bool) -> list[Outcome]:
        """Write what it can; return the outcomes still to write (after a connection error
        the caller retries exactly those)."""
        successes = [o for o in batch if o.kind is Kind.SUCCESS]
        others = [o for o in batch if o.kind is not Kind.SUCCESS]
        async with self._pool.connection() as conn:
            if successes:
                won = await store.mark_success_many(
                    conn, [o.task.id for o in successes], [o.task.effective_id for o in successes]
                )
                info = logs.enabled(logging.INFO)
                for o in successes:
                    if o.task.id in won:
                        if info:
                            log.info("task_succeeded", **self._fields(o))
                        self._count(o)
                    else:
                        self._lease_lost(o, retried)
                successes = []
            while others:
                o = others[0]
                finished = await self._finish(conn, o)
                if finished is None:
                    self._lease_lost(o, retried)
                else:
                    self._log_failure(o, finished)
                    self._count(o)
                others.pop(0)
        return successes + others

    async def _finish(self, conn: Any, o: Outcome) -> Finished | None:
        if o.kind is Kind.DEAD:
            return await store.mark_dead(
                conn, task_id=o.task.id, token=o.task.effective_id, error=o.error or ""
            )
        opts = self._options_for(o.task.task_type)
        return await store.mark_failed(
            conn,
            task_id=o.task.id,
            token=o.task.effective_id,
            error=o.error or "",
            delay_seconds=opts.retry_delay_seconds,
            jitter_seconds=opts.retry_jitter_seconds,
            after_seconds=o.after_seconds,
            # A deliberate taskq.Retry is a snooze, not a sign the downstream is sick.
            counts_for_breaker=o.kind is Kind.FAILURE,
            breaker_threshold=self._breaker_threshold,
        )

    def _fields(self, o: Outcome) -> dict[str, Any]:
        fields = task_fields(o, self._worker_id)
        if self._log_payloads:
            fields["payload"] = o.task.payload
        return fields

    def _count(self, o: Outcome) -> None:
        if self._metrics is not None:
            self._metrics.outcome(o)

    def _lease_lost(self, o: Outcome, retried: bool) -> None:
        if self._metrics is not None:
            self._metrics.counted(o.task.queue, o.task.task_type, "lease_lost")
        # After a reconnect the first try may have committed before the connection dropped;
        # then "no row matched" is our own earlier write, not a lost lease.
        log.warning(
            "lease_lost",
            outcome=o.kind.value,
            maybe_already_written=retried,
            **self._fields(o),
        )

    def _log_failure(self, o: Outcome, finished: Finished) -> None:
        fields = self._fields(o)
        if finished.status is Status.DEAD_LETTER:
            log.warning("task_dead_lettered", error_type=o.error_type, **fields)
        else:
            log.info(
                "task_failed",
                error_type=o.error_type,
                retry_count=finished.retry_count,
                next_retry_time=finished.next_retry_time.isoformat()
                if finished.next_retry_time
                else None,
                **fields,
            )
