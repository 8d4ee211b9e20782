"""The Completer: the one writer of every move out of PROCESSING.

Whoever decides how an attempt ended (the handler, its timeout, a shutdown, a failed handler
connection, the heartbeat, the reaper), the row leaves PROCESSING through this module and the
fenced statements of ``sql/queries/finish.sql`` (via ``store/finish.py``), nowhere else:

* outcomes the executor reports are queued here and written in batches, one statement per kind
  per flush (``mark_success_many``, ``mark_failed_many``, ``mark_dead_many``,
  ``release_many``). Under load this batches naturally; when idle it adds no delay. A write
  that fails because the connection dropped is retried with backoff until it lands, never
  dropped. A write that matches no row means the attempt's lease was lost: logged, never
  retried;
* an idempotent handler commits its SUCCESS inside its own transaction with
  ``commit_success`` / ``acommit_success`` (the same ``mark_success_many`` statement, planned
  with the same settings);
* the reaper's rescue is ``reap``; the heartbeat's strays are given back with ``put_strays``.

The queue is bounded for the claimers: once ``capacity`` outcomes wait to be written, claimers
wait for ``room`` before claiming more (the executor's reports themselves never block and are
never dropped). ``lease_lost`` is logged here and only here, with one set of keys.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import logs
from taskq.backoff import Backoff
from taskq.db import store
from taskq.db.connection import ConnectionError_, KeptConnection
from taskq.model import ClaimedTask, Finished, Status, TaskOptions
from taskq.outcome import Kind, Outcome
from taskq.service import Service
from taskq.settings import CRASH_LIMIT
from taskq.worker.inflight import ClaimsInFlight
from taskq.worker.metrics import Metrics

log = structlog.get_logger("taskq.worker.completer")

MAX_BATCH = 1000
DEFAULT_CAPACITY = 1000
RECENT = 4096  # attempts remembered as written, against stale stray reports
CLAIM_WAIT_SECONDS = 0.25  # at most this long for a claim's reply before a batch is sent


@dataclass(frozen=True, slots=True)
class Stray:
    """A PROCESSING row under this worker's id that nothing in this worker runs (a claim whose
    reply was lost): given back uncharged."""

    id: int
    token: uuid.UUID


Item = Outcome | Stray


def _fields(task: ClaimedTask, worker_id: str) -> dict[str, Any]:
    return {
        "task_id": task.id,
        "task_type": task.task_type,
        "queue": task.queue,
        "biz_id": task.biz_id,
        "trace_id": task.trace_id,
        "attempt": task.retry_count,
        "effective_id": str(task.effective_id),
        "worker_id": worker_id,
    }


def task_fields(outcome: Outcome, worker_id: str) -> dict[str, Any]:
    fields = _fields(outcome.task, worker_id)
    fields["duration_ms"] = round(outcome.duration_seconds * 1000, 3)
    return fields


# --- the idempotent commit: the same statement, inside the handler's transaction ------------


def _success_outcome(duplicate: bool) -> str:
    return "duplicate" if duplicate else "success"


def commit_success(conn: psycopg.Connection[Any], task: ClaimedTask, *, duplicate: bool) -> bool:
    """PROCESSING -> SUCCESS inside the caller's open transaction (a sync idempotent handler's
    thread). False: the attempt was taken away; the caller must roll back."""
    return store.mark_success_in_transaction(
        conn, task.id, task.effective_id, outcome=_success_outcome(duplicate)
    )


async def acommit_success(
    conn: psycopg.AsyncConnection[Any], task: ClaimedTask, *, duplicate: bool
) -> bool:
    return await store.amark_success_in_transaction(
        conn, task.id, task.effective_id, outcome=_success_outcome(duplicate)
    )


# --- the reaper's rescue --------------------------------------------------------------------


async def reap(
    conn: psycopg.AsyncConnection[Any],
    *,
    grace_seconds: float,
    orphan_after_seconds: float,
    crash_limit: int = CRASH_LIMIT,
) -> tuple[list[dict[str, Any]], list[str]]:
    """One reaper pass in one transaction: (rescued attempts, forgotten workers)."""
    async with conn.transaction():
        rescued = await store.reap_attempts(
            conn,
            grace_seconds=grace_seconds,
            orphan_after_seconds=orphan_after_seconds,
            crash_limit=crash_limit,
        )
        forgotten = await store.delete_dead_workers(conn)
    return rescued, forgotten


class Completer(Service):
    name = "completer"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        options_for: Callable[[str], TaskOptions],
        *,
        worker_id: str,
        wake: Callable[[list[str]], object] | None = None,
        metrics: Metrics | None = None,
        breaker_threshold: int = 5,
        log_payloads: bool = False,
        capacity: int = DEFAULT_CAPACITY,
        claims_in_flight: ClaimsInFlight | None = None,
        pgbouncer: bool = False,
    ) -> None:
        super().__init__()
        self._log_payloads = log_payloads
        # Kept from batch to batch (KeptConnection), its session planning the completions with
        # store.PLANNER_SETTINGS (not through PgBouncer: see there).
        self._conn = KeptConnection(pool, settings={} if pgbouncer else store.PLANNER_SETTINGS)
        self._wake = wake
        self._claims_in_flight = claims_in_flight
        self._metrics = metrics
        self._breaker_threshold = breaker_threshold
        self._options_for = options_for
        self._worker_id = worker_id
        # A plain list and two events, not an asyncio.Queue: its put_nowait / get_nowait /
        # task_done per outcome were most of the intake's cost per attempt.
        self._items: list[Item] = []  # queued, not yet taken into a batch
        self._arrived = asyncio.Event()  # set when an item is queued
        self._all_written = asyncio.Event()  # set while nothing is queued or being written
        self._all_written.set()
        self.capacity = max(1, capacity)
        self._room = asyncio.Event()
        self._room.set()
        self._batch: list[Item] = []  # taken off the queue, being written
        # The tokens of the attempts written last, oldest first: a heartbeat's stray report
        # computed before one of them was written must not hand it back in again. (A token
        # names one attempt: its row's id is in it, and a new one is drawn at every claim.)
        self._written: collections.OrderedDict[uuid.UUID, None] = collections.OrderedDict()
        self._backoff = Backoff(initial=0.05, cap=5.0)

    # --- intake -----------------------------------------------------------------------------

    def put(self, outcome: Outcome) -> None:
        """Queue an outcome. Never blocks and never drops: the bound is enforced on claiming."""
        self._enqueue(outcome)

    def put_strays(self, strays: Sequence[tuple[int, uuid.UUID]]) -> None:
        for task_id, token in strays:
            self._enqueue(Stray(task_id, token))

    def _enqueue(self, item: Item) -> None:
        items = self._items
        items.append(item)
        if len(items) == 1:
            self._arrived.set()
            self._all_written.clear()
        if len(items) + len(self._batch) >= self.capacity:
            self._room.clear()

    @property
    def pending(self) -> int:
        """Outcomes not yet written (queued, or in the batch being written)."""
        return len(self._items) + len(self._batch)

    def unwritten(self) -> set[int]:
        """The task ids of the outcomes queued or being written. Built when asked (by the
        heartbeat's stray check), rather than counted at every outcome."""
        return {_id(item) for item in self._items} | {_id(item) for item in self._batch}

    def written(self, token: uuid.UUID) -> bool:
        """This attempt's outcome was written lately (the last ``RECENT`` attempts)."""
        return token in self._written

    @property
    def room(self) -> asyncio.Event:
        """Back-pressure for the claimers: set while fewer than ``capacity`` outcomes wait."""
        return self._room

    async def drain(self) -> None:
        """Return once every outcome put so far has been written (or found lost)."""
        await self._all_written.wait()

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                await self.run_once()
        finally:
            await self._conn.give_back()

    async def run_once(self) -> int:
        """Write one batch: what is queued now (waiting for the first item if none is); return
        how many items it held."""
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()
        batch: list[Item] = []
        try:
            # Step aside once before writing: the attempts whose outcomes woke this loop also
            # freed their slots, and the claimer woken by that is due right behind. Its claim's
            # round trip is what the next attempts wait for; this write's is not (the slots
            # are free already). Sent first, the claim overlaps with building and sending this
            # batch (1 process x 100 slots: +8-14 % drain rate), which also collects what
            # arrives meanwhile. Items stay queued until taken below: a cancellation before
            # that leaves them for the next call.
            await asyncio.sleep(0)
            # Then wait for that claim's reply (inflight.py): sent beside it, the batch cost
            # the database more per task than sent after it.
            if self._claims_in_flight is not None:
                await self._claims_in_flight.settled(CLAIM_WAIT_SECONDS)
            batch = self._batch = self._items[:MAX_BATCH]
            del self._items[:MAX_BATCH]
            await self._write_until_done(self._already_written(batch))
        finally:
            self._batch = []
            written = self._written
            for item in batch:
                written[_token(item)] = None
            while len(self._written) > RECENT:
                self._written.popitem(last=False)
            if not self._items:
                self._all_written.set()
            if self.pending < self.capacity:
                self._room.set()
        # A finished task with an ordering key may have unblocked the next one of its key,
        # and no INSERT will NOTIFY about that: look again now that the write is done.
        # Likewise a task of a capped type frees a cluster-wide slot: this worker's claimer
        # of that queue takes it at once (only this one is woken, not every worker).
        keyed = {
            o.task.queue
            for o in batch
            if isinstance(o, Outcome) and (o.task.ordering_key is not None or o.task.capped)
        }
        if keyed and self._wake is not None:
            self._wake(sorted(keyed))
        return len(batch)

    def _already_written(self, batch: list[Item]) -> list[Item]:
        """Idempotent attempts committed their own SUCCESS (or found their lease gone while
        committing): only log them. The rest."""
        rest: list[Item] = []
        for o in batch:
            if not isinstance(o, Outcome):
                rest.append(o)
            elif o.kind is Kind.COMMITTED:
                log.info("task_succeeded", in_transaction=True, **self._fields(o))
                self._count(o)
            elif o.kind is Kind.DUPLICATE:
                log.info("task_duplicate_skipped", **self._fields(o))
                self._count(o)
            elif o.kind is Kind.LOST:
                self.lease_lost(
                    o.task, detected_by="commit", outcome="success", action="rolled_back"
                )
            else:
                rest.append(o)
        return rest

    async def _write_until_done(self, batch: list[Item]) -> None:
        remaining = batch
        retried = False
        while remaining:
            try:
                remaining = await self._write(remaining, retried=retried)
            except ConnectionError_ as exc:
                self.outage.failed(exc)
                retried = True
                await asyncio.sleep(self._backoff.next_delay())
            except Exception:  # loop boundary: a bug must not kill the worker
                log.exception("completion_failed", tasks=[_id(o) for o in remaining])
                return
        self.outage.recovered()
        self._backoff.reset()

    async def _write(self, batch: list[Item], *, retried: bool) -> list[Item]:
        """Write what it can, one statement per kind; return the items still to write (after a
        connection error the caller retries exactly those)."""
        successes: list[Outcome] = []
        failures: list[Outcome] = []
        dead: list[Outcome] = []
        cancelled: list[Outcome] = []
        releases: list[Item] = []
        for item in batch:
            if isinstance(item, Stray) or item.kind is Kind.RELEASED:
                releases.append(item)
            elif item.kind is Kind.SUCCESS:
                successes.append(item)
            elif item.kind is Kind.DEAD:
                dead.append(item)
            elif item.kind is Kind.CANCELLED:
                cancelled.append(item)
            else:
                failures.append(item)
        async with self._conn.use() as conn:
            if successes:
                await self._write_successes(conn, successes, retried)
                successes = []
            if failures:
                await self._write_failures(conn, failures, retried)
                failures = []
            if dead:
                await self._write_dead(conn, dead, retried)
                dead = []
            if cancelled:
                await self._write_cancelled(conn, cancelled, retried)
                cancelled = []
            if releases:
                await self._write_releases(conn, releases, retried)
                releases = []
        return [*successes, *failures, *dead, *cancelled, *releases]

    async def _write_successes(self, conn: Any, batch: list[Outcome], retried: bool) -> None:
        won = await store.mark_success_many(
            conn, [o.task.id for o in batch], [o.task.effective_id for o in batch]
        )
        info = logs.enabled(logging.INFO)
        written: list[Outcome] = []
        for o in batch:
            if o.task.id in won:
                if info:
                    log.info("task_succeeded", **self._fields(o))
                written.append(o)
            else:
                self._lost_on_write(o, retried)
        if self._metrics is not None:
            self._metrics.outcomes(written)  # counted per batch, not per task

    async def _write_failures(self, conn: Any, batch: list[Outcome], retried: bool) -> None:
        options = [self._options_for(o.task.task_type) for o in batch]
        finished = await store.mark_failed_many(
            conn,
            ids=[o.task.id for o in batch],
            tokens=[o.task.effective_id for o in batch],
            errors=[o.error or "" for o in batch],
            after_seconds=[o.after_seconds for o in batch],
            delay_seconds=[opts.retry_delay_seconds for opts in options],
            jitter_seconds=[opts.retry_jitter_seconds for opts in options],
            # A deliberate taskq.Retry is a snooze, not a sign the downstream is sick.
            counts_for_breaker=[o.kind is Kind.FAILURE for o in batch],
            breaker_threshold=self._breaker_threshold,
        )
        self._log_finished(batch, finished, retried)

    async def _write_dead(self, conn: Any, batch: list[Outcome], retried: bool) -> None:
        finished = await store.mark_dead_many(
            conn,
            ids=[o.task.id for o in batch],
            tokens=[o.task.effective_id for o in batch],
            errors=[o.error or "" for o in batch],
        )
        self._log_finished(batch, finished, retried)

    async def _write_cancelled(self, conn: Any, batch: list[Outcome], retried: bool) -> None:
        finished = await store.mark_cancelled_many(
            conn, [o.task.id for o in batch], [o.task.effective_id for o in batch]
        )
        self._log_finished(batch, finished, retried)

    async def _write_releases(self, conn: Any, batch: list[Item], retried: bool) -> None:
        tokens = [o.token if isinstance(o, Stray) else o.task.effective_id for o in batch]
        released = set(await store.release_many(conn, [_id(o) for o in batch], tokens))
        for o in batch:
            if isinstance(o, Stray):
                if o.id in released:
                    log.warning(
                        "task_released",
                        task_id=o.id,
                        effective_id=str(o.token),
                        worker_id=self._worker_id,
                        reason="StrayClaim: held by this worker in the database but not running "
                        "here (a claim reply was lost)",
                    )
                continue  # not held any more: nothing to say
            if o.task.id in released:
                log.info("task_released", reason=o.error, **self._fields(o))
                self._count(o)
            else:
                self._lost_on_write(o, retried)

    def _log_finished(
        self, batch: list[Outcome], finished: dict[int, Finished], retried: bool
    ) -> None:
        written: dict[str | None, list[Outcome]] = {}
        for o in batch:
            done = finished.get(o.task.id)
            if done is None:
                self._lost_on_write(o, retried)
                continue
            self._log_failure(o, done)
            label = "dead_lettered" if done.status is Status.DEAD_LETTER else None
            written.setdefault(label, []).append(o)
        if self._metrics is not None:
            for label, outcomes in written.items():
                self._metrics.outcomes(outcomes, label)

    # --- logging and counting ---------------------------------------------------------------

    def _fields(self, o: Outcome) -> dict[str, Any]:
        fields = task_fields(o, self._worker_id)
        if self._log_payloads:
            fields["payload"] = o.task.payload
        return fields

    def _count(self, o: Outcome, label: str | None = None) -> None:
        if self._metrics is not None:
            self._metrics.outcome(o, label)

    def _lost_on_write(self, o: Outcome, retried: bool) -> None:
        # After a reconnect the first try may have committed before the connection dropped;
        # then "no row matched" is our own earlier write, not a lost lease.
        self.lease_lost(
            o.task,
            detected_by="completion",
            outcome=o.kind.value,
            action="discarded",
            maybe_already_written=retried,
        )

    def lease_lost(
        self,
        task: ClaimedTask,
        *,
        detected_by: str,
        outcome: str | None,
        action: str,
        maybe_already_written: bool = False,
    ) -> None:
        """The one ``lease_lost`` event: the attempt was taken away (rescued by the reaper,
        perhaps re-claimed elsewhere). ``detected_by``: completion (the write matched no row),
        commit (an idempotent commit matched no row and rolled back), heartbeat."""
        if self._metrics is not None:
            self._metrics.counted(task.queue, task.task_type, "lease_lost")
        log.warning(
            "lease_lost",
            detected_by=detected_by,
            outcome=outcome,
            action=action,
            maybe_already_written=maybe_already_written,
            **_fields(task, self._worker_id),
        )

    def _log_failure(self, o: Outcome, finished: Finished) -> None:
        if finished.status is Status.DEAD_LETTER:
            log.warning("task_dead_lettered", error_type=o.error_type, **self._fields(o))
        elif not logs.enabled(logging.INFO):
            # A failure storm at the usual production level (warning) must not build and trim
            # the fields of events the logger drops: that was ~5 % of a failing worker's CPU.
            return
        elif finished.status is Status.CANCELLED:
            log.info("task_cancelled", reason=o.error, **self._fields(o))
        else:
            log.info(
                "task_failed",
                error_type=o.error_type,
                error=_trim(o.error),
                retry_count=finished.retry_count,
                next_retry_time=finished.next_retry_time.isoformat()
                if finished.next_retry_time
                else None,
                **self._fields(o),
            )


def _id(item: Item) -> int:
    return item.id if isinstance(item, Stray) else item.task.id


def _token(item: Item) -> uuid.UUID:
    return item.token if isinstance(item, Stray) else item.task.effective_id


def _trim(error: str | None, limit: int = 300) -> str | None:
    """The first line of an error message, cut to ``limit`` characters, for a log line (the
    whole traceback is on the row's ``last_error``)."""
    if not error:
        return None
    first = error.strip().splitlines()[0] if error.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"
