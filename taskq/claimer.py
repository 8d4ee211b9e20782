"""The Claimer: one per queue. Claims runnable tasks, never more than its free slots, and hands
each one to the executor.

It claims when (a) the notifier says the queue got work, (b) the jittered poll fires (the
fallback for lost notifications and for retries coming due), or (c) a slot frees up while the
last claim came back full (there is probably more). After a claim that came back short the
queue is drained, and freed slots wait for (a) or (b) instead of querying an empty queue.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import logs, store
from taskq.backoff import Backoff, jittered
from taskq.control import ControlWatcher
from taskq.db import ConnectionError_, first_line
from taskq.executor import Executor
from taskq.metrics import Metrics
from taskq.model import ClaimedTask, TaskOptions
from taskq.outcome import Outcome
from taskq.protection import Policy, claim_policy

log = structlog.get_logger("taskq.claimer")


class Claimer:
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
        memory_ok: Callable[[], bool] | None = None,
    ) -> None:
        self.queue = queue
        self.slots = slots
        self._handlers = list(handlers)
        self._pool = pool
        self._executor = executor
        self._report = report
        self._worker_id = worker_id
        self._poll = poll_interval_seconds
        self._memory_ok = memory_ok
        self._control = control
        self._metrics = metrics
        self._probe_timeout = probe_timeout_seconds
        self._wake = asyncio.Event()
        self._wake.set()  # look once at start
        self._changed = asyncio.Event()
        self._stopping = False
        self._in_flight: dict[int, ClaimedTask] = {}  # holding a slot
        self._live: dict[int, ClaimedTask] = {}  # running, outcome not yet reported
        self._lost: set[int] = set()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._interrupted: list[ClaimedTask] = []
        self.idle = asyncio.Event()
        self.idle.set()
        self.memory_blocked = asyncio.Event()  # set each time the memory guard refuses a claim
        self.claims = 0

    @property
    def free_slots(self) -> int:
        return self.slots - len(self._in_flight)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Stop claiming now; in-flight tasks keep running."""
        self._stopping = True
        self._changed.set()
        self._wake.set()

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
            log.warning(
                "lease_lost",
                task_id=task_id,
                task_type=task.task_type,
                queue=task.queue,
                attempt=task.retry_count,
                effective_id=str(task.effective_id),
                worker_id=self._worker_id,
                action="cancelled" if self._executor.is_async(task.task_type) else "fenced",
            )
            running = self._tasks.get(task_id)
            if running is not None and self._executor.is_async(task.task_type):
                running.cancel()

    def interrupt(self) -> None:
        """Cancel every in-flight attempt (forced shutdown); they are released, not charged."""
        for task in list(self._tasks.values()):
            task.cancel()

    async def run(self) -> None:
        self._metrics.running.labels(self.queue).set(0)
        try:
            async with asyncio.TaskGroup() as group:
                await self._claim_loop(group)
        finally:
            await self._release_interrupted()

    async def _claim_loop(self, group: asyncio.TaskGroup) -> None:
        backoff = Backoff(initial=0.1, cap=5.0)
        outage_logged = False
        while not self._stopping:
            if self.free_slots <= 0:
                self._changed.clear()
                await self._changed.wait()
                continue
            if not self._wake.is_set():
                try:
                    async with asyncio.timeout(jittered(self._poll)):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            if self._stopping:
                break
            if self._memory_ok is not None and not self._memory_ok():
                # Over the memory limit: claim nothing until the next poll says otherwise.
                self.memory_blocked.set()
                await asyncio.sleep(jittered(self._poll))
                continue
            self._wake.clear()
            policy = claim_policy(
                self._control.state,
                queue=self.queue,
                handlers=self._handlers,
                free=self.free_slots,
                slots=self.slots,
            )
            if policy.limit <= 0 or not (policy.handlers or policy.probes):
                continue  # paused, stopped or throttled: wait for a control change or the poll
            try:
                async with self._pool.connection() as conn:
                    claimed = await self._claim(conn, policy)
            except ConnectionError_ as exc:
                if not outage_logged:
                    log.warning("claim_unavailable", queue=self.queue, error=first_line(exc))
                    outage_logged = True
                self._wake.set()  # try again after the pause
                await asyncio.sleep(backoff.next_delay())
                await _purge_broken(self._pool)
                continue
            except Exception:  # loop boundary: log, pause, keep serving
                log.exception("claim_failed", queue=self.queue)
                await asyncio.sleep(jittered(self._poll))
                continue
            if outage_logged:
                log.info("claim_resumed", queue=self.queue)
                outage_logged = False
            backoff.reset()
            self.claims += 1
            if len(claimed) == policy.limit:
                self._wake.set()  # a full batch: there is probably more
            debug = logs.enabled(logging.DEBUG)
            for task in claimed:
                self._in_flight[task.id] = task
                self._live[task.id] = task
                self.idle.clear()
                latency = (
                    (task.started_at - task.ready_at).total_seconds() if task.ready_at else None
                )
                self._metrics.claimed(task.queue, task.task_type, task.retry_count, latency)
                if debug:
                    log.debug(
                        "task_claimed",
                        task_id=task.id,
                        task_type=task.task_type,
                        queue=task.queue,
                        attempt=task.retry_count,
                        effective_id=str(task.effective_id),
                    )
                self._tasks[task.id] = group.create_task(self._run_one(task))
            self._metrics.running.labels(self.queue).set(len(self._in_flight))

    async def _claim(self, conn: Any, policy: Policy) -> list[ClaimedTask]:
        """Probes first (one task of a HALF_OPEN type, if this worker wins the probe), then
        the batch the policy allows."""
        claimed: list[ClaimedTask] = []
        limit = policy.limit
        for task_type in policy.probes:
            if limit <= 0:
                break
            if not await store.breaker_take_probe(
                conn,
                task_type=task_type,
                worker_id=self._worker_id,
                probe_timeout=self._probe_timeout,
            ):
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
                claimed += probe
                limit -= 1
            else:
                await store.breaker_give_back_probe(
                    conn, task_type=task_type, worker_id=self._worker_id
                )
        if policy.handlers and limit > 0:
            claimed += await store.claim_batch(
                conn,
                queue=self.queue,
                handlers=policy.handlers,
                limit=limit,
                worker_id=self._worker_id,
                retries_only=policy.retries_only,
            )
        return claimed

    def _reported(self, outcome: Outcome) -> None:
        self._live.pop(outcome.task.id, None)
        self._report(outcome)

    async def _run_one(self, task: ClaimedTask) -> None:
        try:
            await self._executor.run(task, self._reported)
        except asyncio.CancelledError:
            if task.id not in self._lost:
                self._interrupted.append(task)  # shutdown: give it back, uncharged
            raise
        except Exception:  # loop boundary: the executor reports handler errors itself
            log.exception("executor_failed", task_id=task.id)
        finally:
            self._in_flight.pop(task.id, None)
            self._live.pop(task.id, None)
            self._lost.discard(task.id)
            self._tasks.pop(task.id, None)
            self._metrics.running.labels(self.queue).set(len(self._in_flight))
            if not self._in_flight:
                self.idle.set()
            self._changed.set()

    async def _release_interrupted(self) -> None:
        """Give interrupted attempts back as runnable, without charging an attempt."""
        if not self._interrupted:
            return
        tasks, self._interrupted = self._interrupted, []
        ids = [t.id for t in tasks]
        tokens: list[uuid.UUID] = [t.effective_id for t in tasks]
        backoff = Backoff(initial=0.1, cap=2.0)
        for _ in range(20):
            try:
                async with self._pool.connection() as conn:
                    released = await store.release_many(conn, ids, tokens)
                log.info("tasks_released", queue=self.queue, task_ids=released)
                return
            except ConnectionError_ as exc:
                log.warning("release_delayed", error=first_line(exc))
                await asyncio.sleep(backoff.next_delay())
        log.error("release_failed", task_ids=ids)


async def _purge_broken(pool: AsyncConnectionPool[Any]) -> None:
    """After a connection error, test the idle connections so the next claim does not pick up
    another one the server already closed (a restart breaks them all at once)."""
    try:
        await pool.check()
    except Exception:  # the pool replaces what it can; the next claim reports the rest
        log.debug("pool_check_failed", exc_info=True)
