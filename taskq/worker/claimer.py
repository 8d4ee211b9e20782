"""The Claimer: one per queue. Claims runnable tasks, never more than its free slots, and hands
each one to the executor.

It claims when (a) the notifier says the queue got work, (b) the jittered poll fires (the
fallback for lost notifications and for retries coming due), or (c) a slot frees up while the
last claim came back full (there is probably more). After a claim that came back short the
queue is drained, and freed slots wait for (a) or (b) instead of querying an empty queue.
While the completer has ``capacity`` outcomes waiting to be written, it claims nothing
(back-pressure: a struggling database gets fewer new attempts, not more).

Tasks marked isolate (they were running beside an attempt that crashed the process) are never
in these batches: the worker's isolator (``isolator.py``) closes ``gate`` to stop every
claimer of the process, waits until nothing runs, and has one claimer run one such task alone
(``claim_isolated``).

The claimer never writes an outcome: it hands every one to the completer (``report``), which
also logs lost leases (``on_lease_lost``).

Each claimer keeps one pooled connection for its claims from round to round
(``KeptConnection``), instead of taking whichever the pool hands out next: the pool hands its
connections out in turn, and the first claim on a backend plans every statement of the claim
functions (12-35 ms), so a worker that had just started paid that once per pooled connection,
on live tasks.

A round after one that came back short expects few rows (at idle, the one task whose NOTIFY
woke it): it claims through ``claim_few``, which locks and claims them in one scan when they
fit in the batch, and answers as the full claim otherwise (sql/ddl/0031).

A round that may take a breaker's probe (a HALF_OPEN type, see control/protection.py) keeps
one slot for it, claims and starts its batch, and only then looks for the probe: the probe's
statements are usually refused (another worker's) or find nothing, and at idle they delayed
the one task whose NOTIFY woke the round (p99 of the idle dispatch latency 5.57 -> 4.74 ms,
medians of three alternated 1,500-task runs with a HALF_OPEN type that had nothing to probe).
A kept slot the probe did not use goes to the next round, which follows at once.

Wake-ups are paced (``Cooldown``): after a round that came back short, a wake-up starts the
next round at once while rounds are rare, and once they come faster than one per
``coalesce_seconds`` (after a burst of ``COALESCE_BURST``), no sooner than that. NOTIFY is only
a hint (anyone who can connect may send one), so a flood of them costs at most one claim round
per queue per ``coalesce_seconds``; a task that arrives just after a round at idle does not wait
for the period; a queue that is being drained (full rounds) is never held back.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import logs
from taskq.backoff import Backoff, Cooldown, jittered
from taskq.control.protection import Policy, claim_policy
from taskq.control.state import ControlWatcher
from taskq.db import store
from taskq.db.connection import KeptConnection
from taskq.model import Claimed, ClaimedTask, TaskOptions
from taskq.outcome import Outcome
from taskq.service import OUTAGE_ERRORS, Service
from taskq.worker.executor import Executor
from taskq.worker.inflight import ClaimsInFlight
from taskq.worker.metrics import Metrics

log = structlog.get_logger("taskq.worker.claimer")

COALESCE_BURST = 4
"""Claim rounds that wake-ups may start back to back before the pacing holds them to one per
``coalesce_seconds``."""


class Claimer(Service):
    name = "claimer"

    def __init__(
        self,
        *,
        queue: str,
        slots: int,
        handlers: Sequence[TaskOptions],
        pool: AsyncConnectionPool[Any],
        executor: Executor,
        report: Callable[[Outcome], None],
        worker_id: str,
        poll_interval_seconds: float,
        control: ControlWatcher,
        metrics: Metrics,
        probe_timeout_seconds: float = 300.0,
        empty_probe_wait_seconds: float = 5.0,
        memory_ok: Callable[[], bool] | None = None,
        room: asyncio.Event | None = None,
        on_lease_lost: Callable[..., None] | None = None,
        coalesce_seconds: float = 0.005,
        gate: asyncio.Event | None = None,
        claims_in_flight: ClaimsInFlight | None = None,
    ) -> None:
        super().__init__(queue=queue)
        self.queue = queue
        self.slots = slots
        self._handlers = list(handlers)
        self._pool = pool
        self._conn = KeptConnection(pool)  # kept between rounds (module docstring)
        self._cursor: psycopg.AsyncCursor[tuple[Any, ...]] | None = None  # on that connection
        self._executor = executor
        self._report = report
        self._worker_id = worker_id
        self._poll = poll_interval_seconds
        self._memory_ok = memory_ok
        self._control = control
        self._metrics = metrics
        self._probe_timeout = probe_timeout_seconds
        self._empty_probe_wait = empty_probe_wait_seconds
        self._probe_quiet: dict[str, float] = {}  # type -> monotonic time to try its probe again
        self._room = room
        self._on_lease_lost = on_lease_lost
        self._cooldown = Cooldown(coalesce_seconds, COALESCE_BURST)
        # Shared with the completer, which sends its batch once our claim is answered.
        self._claims_in_flight = ClaimsInFlight() if claims_in_flight is None else claims_in_flight
        self.gate = gate
        """Cleared by the isolator: claim nothing until it is set again."""
        self.round = asyncio.Lock()
        """Held through a claim round: once the gate is cleared, acquiring it once means no
        round that missed the gate is still out."""
        self._last_full = False
        self._backoff = Backoff(initial=0.1, cap=5.0)
        self._wake = asyncio.Event()
        self._wake.set()  # look once at start
        self._changed = asyncio.Event()
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._in_flight: dict[int, ClaimedTask] = {}  # holding a slot
        self._live: dict[int, ClaimedTask] = {}  # running, outcome not yet reported
        self._lost: set[int] = set()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        # Read when scraped (in the metrics server's thread; len() is atomic under the GIL),
        # instead of set at every claim and every finished attempt.
        metrics.running_child(queue).set_function(lambda: len(self._in_flight))
        self.claiming = False
        """A claim round is out: its reply (new attempts) may still arrive."""
        self.idle = asyncio.Event()
        self.idle.set()
        self.memory_blocked = asyncio.Event()  # set each time the memory guard refuses a claim
        self.claims = 0  # claim statements run
        self.probe_tries = 0  # breaker probes this claimer tried to take
        self.rounds = 0  # claim rounds started (a paused or throttled round runs no statement)
        self._token_due: float | None = None  # monotonic time a rate-limited type gets a token

    @property
    def free_slots(self) -> int:
        return self.slots - len(self._in_flight)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def wake(self) -> bool:
        """Claim again now; False if it had been woken already (nothing changes)."""
        if self._wake.is_set():
            return False
        self._wake.set()
        return True

    def stop(self) -> None:
        """Stop claiming now; in-flight tasks keep running."""
        self._stopping = True
        self._stop_event.set()
        self._changed.set()
        self._wake.set()

    def holds(self, task_id: int) -> bool:
        """The attempt occupies a slot here (running, or its thread not yet gone)."""
        return task_id in self._in_flight

    def held(self) -> list[tuple[int, uuid.UUID]]:
        """The attempts this claimer is running (for the heartbeat's lease check). Called from
        the heartbeat thread: ``dict.copy`` is atomic under the GIL."""
        return [(t.id, t.effective_id) for t in self._live.copy().values()]

    def lease_lost(self, task_ids: list[int]) -> None:
        """The heartbeat found these attempts taken away (rescued by the reaper, probably
        re-claimed elsewhere). Stop an async handler now; a sync thread cannot be stopped, so
        its result will simply be fenced out when it reports."""
        for task_id in task_ids:
            task = self._live.get(task_id)
            if task is None:
                continue  # it finished between the heartbeat's snapshot and its answer
            self._lost.add(task_id)
            is_async = self._executor.is_async(task.task_type)
            if self._on_lease_lost is not None:
                self._on_lease_lost(
                    task,
                    detected_by="heartbeat",
                    outcome=None,
                    action="cancelled" if is_async else "fenced",
                )
            running = self._tasks.get(task_id)
            if running is not None and is_async:
                running.cancel()

    def interrupt(self, *, force: bool = False) -> None:
        """The shutdown timeout is up: cancel the async attempts (each is released, uncharged,
        once its handler has stopped) and stop waiting for sync threads that overran their
        timeout (their outcome is written already). A sync thread still running inside its
        timeout is waited for: it cannot be stopped, and releasing its row would let another
        worker run the task at the same time. ``force`` stops waiting for those too: their rows
        stay PROCESSING until the process has exited (the reaper rescues them)."""
        for task_id, running in list(self._tasks.items()):
            task = self._in_flight.get(task_id)
            if (
                force
                or task is None
                or self._executor.is_async(task.task_type)
                or task_id not in self._live
            ):
                running.cancel()

    async def run(self) -> None:
        try:
            await self._claim_loop()
            await self.wait_attempts()  # stopped: the attempts out run to their end
        finally:
            # Cancelled (a forced stop) or failed: stop the attempts still out, and wait for
            # each to end (an async one reports itself released; see Executor.run).
            await self._end_attempts()
            await self._conn.give_back()

    async def wait_attempts(self) -> None:
        """Until every attempt started so far has ended."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))
            self._forget_ended()

    async def _end_attempts(self) -> None:
        cancelled = False
        while self._tasks:
            running = list(self._tasks.values())
            for task in running:
                task.cancel()
            try:
                await asyncio.wait(running)
            except asyncio.CancelledError:
                cancelled = True  # cancelled again while waiting: still wait, as a TaskGroup does
            self._forget_ended()
        if cancelled:
            raise asyncio.CancelledError

    def _forget_ended(self) -> None:
        """Free the slots of attempts whose task ended without running ``_run_one``'s cleanup
        (cancelled before its first step)."""
        for task_id in [i for i, t in self._tasks.items() if t.done()]:
            self._free(task_id)

    def _free(self, task_id: int) -> None:
        """The attempt has ended: its slot is free."""
        self._in_flight.pop(task_id, None)
        self._live.pop(task_id, None)
        if self._lost:
            self._lost.discard(task_id)
        self._tasks.pop(task_id, None)
        if not self._in_flight:
            self.idle.set()

    async def _claim_loop(self) -> None:
        while not self._stopping:
            if self.free_slots <= 0:
                self._changed.clear()
                await self._changed.wait()
                continue
            if not self._wake.is_set():
                wait = jittered(self._poll)
                if self._token_due is not None:
                    # A rate-limited type has due work: look again when its next token comes.
                    wait = min(wait, max(0.0, self._token_due - time.monotonic()))
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            if not self._last_full:
                # After a short round a wake-up is a hint: paced, so that a flood of them waits
                # (and gathers) while a lone one starts the round at once.
                gap = self._cooldown.wait_seconds()
                if gap > 0:
                    await asyncio.sleep(gap)
            if self._stopping:
                break
            if self._room is not None and not self._room.is_set():
                await self._wait_for_room(self._room)  # back-pressure: the completer is behind
                if self._stopping:
                    break
            if self._memory_ok is not None and not self._memory_ok():
                # Over the memory limit: claim nothing until the next poll says otherwise.
                self.memory_blocked.set()
                await asyncio.sleep(jittered(self._poll))
                continue
            try:
                if await self.run_once():
                    await asyncio.sleep(0)  # the attempts' first steps before this loop's
            except OUTAGE_ERRORS as exc:
                self.outage.failed(exc)
                self._wake.set()  # try again after the pause
                await asyncio.sleep(self._backoff.next_delay())
                await _purge_broken(self._pool)
                continue
            except Exception:  # loop boundary: log, pause, keep serving
                log.exception("service_failed", service=self.name, queue=self.queue)
                await asyncio.sleep(jittered(self._poll))
                continue
            self.outage.recovered()
            self._backoff.reset()

    async def run_once(self) -> list[ClaimedTask]:
        """One claim round: claim what the control state and the free slots allow and start
        each task (``wait_attempts`` waits for them)."""
        self._wake.clear()
        async with self.round:
            if self.gate is not None and not self.gate.is_set():
                return []  # the isolator is emptying the process: it wakes us when it is done
            self._cooldown.take()
            few = not self._last_full  # the last round came back short: expect a few rows
            self._last_full = False
            self.rounds += 1
            policy = claim_policy(
                self._control.state,
                queue=self.queue,
                handlers=self._handlers,
                free=self.free_slots,
                slots=self.slots,
            )
            if policy.limit <= 0 or not (policy.handlers or policy.probes):
                return []  # paused, stopped or throttled: wait for a control change or the poll
            self.claiming = True
            due = self._due_probes(policy)
            batch_limit = policy.limit - len(due) if policy.handlers else 0
            try:
                async with self._conn.use() as conn:
                    claimed = Claimed()
                    if batch_limit > 0:
                        with self._claims_in_flight.claiming():
                            claimed = await self._claim_batch(conn, policy, batch_limit, few=few)
                        self._start(claimed)
                    batch_count = len(claimed)
                    if due:
                        # After the batch has started: a probe's statements (usually refused,
                        # or finding nothing) never delay the tasks the batch dispatches.
                        with self._claims_in_flight.claiming():
                            probed = await self._probe(conn, due)
                        self._start(probed)
                        # A new list, not the batch extended: _start handed the batch to the
                        # claim's metrics callback, which must count it alone.
                        held_for = claimed.held_for
                        claimed = Claimed([*claimed, *probed])
                        claimed.held_for = held_for
            except BaseException:
                self.claiming = False
                raise
            self.claims += 1
            # A rate-limited type with due work says when its next token comes: look again then.
            self._token_due = (
                None if claimed.held_for is None else time.monotonic() + claimed.held_for
            )
            batch_full = bool(policy.handlers) and batch_count >= batch_limit
            if len(claimed) == policy.limit or batch_full:
                # A full batch: there is probably more (and a slot kept for a probe that was
                # not taken goes to the next round's batch).
                self._last_full = True
                self._wake.set()
            self.claiming = False
            return claimed

    async def claim_isolated(self) -> ClaimedTask | None:
        """Claim one task marked isolate and start it (the isolator calls this once it has
        emptied the process). None: nothing to claim, or this claimer cannot run it now."""
        if self._stopping or self._in_flight:
            return None
        if self._memory_ok is not None and not self._memory_ok():
            return None
        async with self.round:
            policy = claim_policy(
                self._control.state,
                queue=self.queue,
                handlers=self._handlers,
                free=self.free_slots,
                slots=self.slots,
            )
            if policy.limit <= 0 or not policy.handlers:
                return None  # paused or throttled
            self.claiming = True
            try:
                async with self._conn.use() as conn:
                    claimed = await store.claim_batch(
                        conn,
                        queue=self.queue,
                        handlers=policy.handlers,
                        limit=1,
                        worker_id=self._worker_id,
                        retries_only=policy.retries_only,
                        isolated=True,
                    )
            finally:
                self.claiming = False
            self.claims += 1
            self._start(claimed)
        if not claimed:
            return None
        task = claimed[0]
        log.info(
            "task_isolated_claimed",
            task_id=task.id,
            task_type=task.task_type,
            queue=task.queue,
            attempt=task.retry_count,
        )
        return task

    def _start(self, claimed: Claimed) -> None:
        """Take a slot for each claimed attempt and start it in an asyncio task of its own.

        Plain tasks, kept in ``_tasks`` until ``_run_one`` ends, not a ``TaskGroup``'s: the
        group's ``create_task`` and the done callback it schedules for every task were 7 % of
        the instructions of a drain worker's path per attempt (callgrind, no-op handlers).
        ``run`` does what the group did: waits for them when stopped, cancels them and waits
        when cancelled."""
        debug = logs.enabled(logging.DEBUG)
        loop = asyncio.get_running_loop()
        if claimed:
            self.idle.clear()
        for task in claimed:
            self._in_flight[task.id] = task
            self._live[task.id] = task
            if debug:
                log.debug(
                    "task_claimed",
                    task_id=task.id,
                    task_type=task.task_type,
                    queue=task.queue,
                    attempt=task.retry_count,
                    effective_id=str(task.effective_id),
                )
            self._tasks[task.id] = loop.create_task(self._run_one(task))
        if claimed:
            # Counted per claim, not per task, once the attempts have taken their first step
            # (callbacks run in the order they were scheduled): at idle the handler of the task
            # whose NOTIFY woke us starts before this bookkeeping, not after it.
            loop.call_soon(self._metrics.claimed_many, claimed)

    async def _wait_for_room(self, room: asyncio.Event) -> None:
        """Until the completer has room, or this claimer is stopped."""
        waiters = [
            asyncio.ensure_future(room.wait()),
            asyncio.ensure_future(self._stop_event.wait()),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _due_probes(self, policy: Policy) -> list[str]:
        """The HALF_OPEN types whose probe this round tries to take, one slot kept for each:
        not those lately refused or found empty (see ``_quiet``)."""
        if not policy.probes:
            return []
        now = time.monotonic()
        due = [t for t in policy.probes if self._probe_quiet.get(t, 0.0) <= now]
        return due[: policy.limit]

    async def _probe(self, conn: Any, due: list[str]) -> Claimed:
        """One task of each HALF_OPEN type in ``due`` whose probe this worker wins."""
        claimed = Claimed()
        for task_type in due:
            self.probe_tries += 1
            if not await store.breaker_take_probe(
                conn,
                task_type=task_type,
                worker_id=self._worker_id,
                probe_timeout=self._probe_timeout,
                empty_wait=self._empty_probe_wait,
            ):
                self._quiet(task_type)
                continue
            probe = await store.claim_batch(
                conn,
                queue=self.queue,
                handlers=[h for h in self._handlers if h.task_type == task_type],
                limit=1,
                worker_id=self._worker_id,
                probe=True,
            )
            if probe:
                log.info("breaker_probe_claimed", task_type=task_type, task_id=probe[0].id)
                self._probe_quiet.pop(task_type, None)
                claimed += probe
            else:
                await store.breaker_give_back_probe(
                    conn, task_type=task_type, worker_id=self._worker_id
                )
                self._quiet(task_type)
        return claimed

    async def _claim_batch(self, conn: Any, policy: Policy, limit: int, *, few: bool) -> Claimed:
        """The batch the policy allows, ``limit`` rows at most. ``few``: the last round came
        back short, so the batch goes through the claim that reads a few rows in one scan
        (``claim_few``): at idle, most claims find the one task whose NOTIFY woke us."""
        cursor = self._cursor
        if cursor is None or cursor.closed or cursor.connection is not conn:
            cursor = self._cursor = store.claim_cursor(conn)
        batch = await store.claim_batch(
            conn,
            queue=self.queue,
            handlers=policy.handlers,
            limit=limit,
            worker_id=self._worker_id,
            retries_only=policy.retries_only,
            few=few,
            cursor=cursor,
        )
        if len(batch) > 1:
            # The cursor keeps its result (every row's payload, as bytes) until the next
            # claim, however long the worker then idles: kept only for the one-row claims of
            # an idle worker, where it pays.
            await cursor.close()
        return batch

    def _quiet(self, task_type: str) -> None:
        """The probe of ``task_type`` was not ours to take (another worker's, or found empty
        lately: ``empty_probe_wait_seconds``) or found no task: try it again after a poll
        interval, not on every claim round (each try is a statement, and a probe that finds
        nothing has read the queue's whole runnable backlog)."""
        self._probe_quiet[task_type] = time.monotonic() + jittered(self._poll)

    def _reported(self, outcome: Outcome) -> None:
        task_id = outcome.task.id
        self._live.pop(task_id, None)
        if self._lost and task_id in self._lost:
            return  # taken away: logged once when the heartbeat found it; a write would miss
        self._report(outcome)

    async def _run_one(self, task: ClaimedTask) -> None:
        try:
            await self._executor.run(task, self._reported)
        except Exception:  # loop boundary: the executor reports handler errors itself
            log.exception("executor_failed", task_id=task.id)
        finally:
            self._free(task.id)
            self._changed.set()


async def _purge_broken(pool: AsyncConnectionPool[Any]) -> None:
    """After a connection error, test the idle connections so the next claim does not pick up
    another one the server already closed (a restart breaks them all at once)."""
    try:
        await pool.check()
    except Exception:  # the pool replaces what it can; the next claim reports the rest
        log.debug("pool_check_failed", exc_info=True)
