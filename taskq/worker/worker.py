"""The Worker: the composition root of one worker process.

Start order: pool -> heartbeat (registers the worker) -> notifier, completer, reaper, claimers
(one per queue) -> ready (systemd READY=1). SIGTERM (via ``request_stop``): STOPPING=1, stop
claiming at once, let in-flight attempts finish for up to the shutdown timeout, then cancel
the async attempts that are left and give them back (RELEASED: PENDING, attempt not charged,
a NOTIFY wakes another worker) once their handler has stopped; a sync thread cannot be
stopped, so it is waited for up to its own timeout and its real outcome is written. Then flush
the completer, unregister, close. ``request_stop(force=True)`` (or a second request) skips the
waits; a sync thread still running then keeps its row PROCESSING until the process has exited
and the reaper rescues it: never two runs of one task at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import tracing
from taskq.app import App
from taskq.control.protection import ProtectionEvaluator
from taskq.control.state import CONTROL_CHANNEL, ControlWatcher
from taskq.db import store
from taskq.db.connection import (
    acheck_connection,
    aconnect,
    application_name,
    first_line,
    for_writes,
    pooler_kwargs,
    unavailable,
    utc_by_name,
)
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError
from taskq.model import check_name
from taskq.ops import prune
from taskq.service import Every
from taskq.settings import (
    DEFAULT_CONCURRENCY,
    PRUNE_INTERVAL_SECONDS,
    STATISTICS_INTERVAL_SECONDS,
    WorkerSettings,
)
from taskq.worker import eventloop, systemd
from taskq.worker.aborts import Aborts
from taskq.worker.claimer import Claimer
from taskq.worker.completer import Completer
from taskq.worker.executor import Executor
from taskq.worker.heartbeat import Heartbeat
from taskq.worker.inflight import ClaimsInFlight
from taskq.worker.isolator import Isolator
from taskq.worker.leader import Elector
from taskq.worker.memory import EXIT_MEMORY, MemoryGuard
from taskq.worker.metrics import GaugeRefresher, Metrics
from taskq.worker.notifier import (
    ABORT_CHANNEL,
    TASKS_CHANNEL,
    Notifier,
    parse_abort_payload,
    parse_tasks_payload,
)
from taskq.worker.reaper import Reaper
from taskq.worker.runtime import WorkerRuntime
from taskq.worker.scheduler import Scheduler

log = structlog.get_logger("taskq.worker.worker")

COMPLETER_SLOTS_FACTOR = 10
"""Outcomes waiting to be written, per slot, before the claimers wait (back-pressure)."""


def parse_queues(spec: str) -> dict[str, int]:
    """``"sms=8,sync=32"`` -> ``{"sms": 8, "sync": 32}``; a bare name gets the default."""
    queues: dict[str, int] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, count = part.partition("=")
        name = name.strip()
        try:
            check_name("queue", name)
        except Exception as exc:
            raise ConfigError(f"bad --queues entry {part!r}: {exc}") from None
        if sep:
            try:
                slots = int(count)
            except ValueError:
                raise ConfigError(
                    f"bad --queues entry {part!r}: concurrency must be an integer"
                ) from None
            if slots < 1:
                raise ConfigError(f"bad --queues entry {part!r}: concurrency must be >= 1")
        else:
            slots = DEFAULT_CONCURRENCY
        if name in queues:
            raise ConfigError(f"queue {name!r} appears twice in --queues")
        queues[name] = slots
    if not queues:
        raise ConfigError("--queues names no queue")
    return queues


def check_listen(settings: WorkerSettings) -> None:
    """Refuse a LISTEN that would silently hear nothing: through PgBouncer's transaction pooling
    the LISTEN lands on a server session that the next transaction hands to someone else."""
    if not settings.listen and settings.listen_dsn:
        raise ConfigError("--listen-dsn and --no-listen contradict each other")
    if settings.pgbouncer and settings.listen and not settings.listen_dsn:
        raise ConfigError(
            "--pgbouncer: LISTEN cannot go through a transaction pooler; pass --listen-dsn with a "
            "direct connection to PostgreSQL, or --no-listen to poll only"
        )


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        app: App,
        *,
        dsn: str | None = None,
        settings: WorkerSettings | None = None,
        worker_id: str | None = None,
    ) -> None:
        if not app.tasks:
            raise ConfigError("the app has no registered tasks; nothing to run")
        self.app = app
        # Resolved here, at the edge: the embedded server starts (if it must) when a worker
        # is built, not when some property happens to be read. Every connection it keeps
        # writes: on a multi-host DSN, only to the primary (for_writes).
        self.dsn = for_writes(resolve_dsn(dsn or app.dsn))
        self.settings = settings or WorkerSettings()
        check_listen(self.settings)
        self.queues = dict(self.settings.queues) or {
            t.options.queue: DEFAULT_CONCURRENCY for t in app.tasks.values()
        }
        self.worker_id = worker_id or new_worker_id()
        tracing.load()  # now, not in the first attempt (an import of a few milliseconds)
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self.claimers: dict[str, Claimer] = {}
        self.reaper: Reaper | None = None
        self.heartbeat: Heartbeat | None = None
        self.notifier: Notifier | None = None
        self.scheduler: Scheduler | None = None
        self.isolator: Isolator | None = None
        self.metrics = Metrics()
        self.control: ControlWatcher | None = None
        self.elector: Elector | None = None
        self.protection: ProtectionEvaluator | None = None
        self._analyze_missing = False  # the schema predates 0033: no statistics upkeep
        self._completer: Completer | None = None
        self._executors: list[Executor] = []
        self.aborts = Aborts()
        self._loop_tick = time.monotonic()
        self.memory: MemoryGuard | None = None
        self.exit_code = 0
        """Non-zero when the worker stopped itself: ``EXIT_MEMORY`` (75), memory never came back."""

    def _memory_gave_up(self) -> None:
        self.exit_code = EXIT_MEMORY
        self.request_stop()

    def request_stop(self, *, force: bool = False) -> None:
        """Begin a graceful shutdown; ``force`` gives back in-flight tasks at once."""
        if self._stop.is_set():
            force = True  # a second request means "now"
        self._stop.set()
        if force:
            self._force.set()
            for claimer in self.claimers.values():
                claimer.interrupt(force=True)

    def _held(self) -> list[tuple[int, uuid.UUID]]:
        return [held for claimer in list(self.claimers.values()) for held in claimer.held()]

    def _strays(self, strays: list[tuple[int, uuid.UUID]]) -> None:
        """On the event loop: rows the database says this worker holds and that it does not
        run. A claim round that is out may still bring some of them (its reply is on the way):
        then wait for the next beat. Otherwise give back the ones neither running here, nor
        waiting in the completer, nor written by it since the beat looked (the report is then
        stale: its attempt ended here), uncharged."""
        if self._completer is None or any(c.claiming for c in self.claimers.values()):
            return
        completer = self._completer
        unwritten = completer.unwritten()
        found = [
            (task_id, token)
            for task_id, token in strays
            if task_id not in unwritten
            and not completer.written(token)
            and not any(c.holds(task_id) for c in self.claimers.values())
        ]
        if found:
            completer.put_strays(found)

    def _loop_silence(self) -> float:
        return time.monotonic() - self._loop_tick

    async def _tick(self) -> None:
        """Proof of life for the watchdog: the heartbeat thread pets systemd only while this
        keeps ticking, so a wedged event loop gets the process restarted."""
        watchdog = systemd.watchdog_seconds()
        period = min(1.0, watchdog / 4) if watchdog else 1.0
        while True:
            self._loop_tick = time.monotonic()
            await asyncio.sleep(period)

    async def _prune(self) -> None:
        if self.settings.prune_after_seconds is None:
            return
        await asyncio.to_thread(
            prune.prune,
            self.dsn,
            older_than_seconds=self.settings.prune_after_seconds,
            max_batches=200,  # at most 1M rows a pass; the next pass continues
            connect_kwargs=pooler_kwargs(pgbouncer=self.settings.pgbouncer),
        )

    async def _analyze(self, pool: AsyncConnectionPool[Any]) -> None:
        """Keep the queue table's statistics fresh where autovacuum does not: without them the
        plans every session prepared on a small table stay as they were while it grows (0033).
        A schema older than 0033 (workers upgraded before ``taskq migrate``) is said once."""
        if self._analyze_missing:
            return
        try:
            async with pool.connection() as conn:
                analyzed = await store.analyze_when_stale(conn)
        except psycopg.errors.UndefinedFunction as exc:
            self._analyze_missing = True
            log.warning("statistics_upkeep_unavailable", error=str(exc).splitlines()[0])
            return
        if analyzed:
            log.info("tasks_analyzed", reason="autovacuum does not cover taskq.tasks")

    def _wake_all(self) -> None:
        self._wake(None)

    def _wake(self, queues: list[str] | None) -> bool:
        """Wake the claimers of ``queues`` (None: all); whether one had not been woken yet."""
        woke = False
        for name in self.claimers if queues is None else queues:
            claimer = self.claimers.get(name)
            if claimer is not None and claimer.wake():
                woke = True
        return woke

    async def _register_types(self, pool: AsyncConnectionPool[Any]) -> None:
        """Before any claim: SQL producers that name no queue route by what this app says.
        A role without the grant (roles.sql not re-run since the upgrade) only loses routing."""
        try:
            async with pool.connection() as conn:
                await store.aregister_task_types(conn, self.worker_id, self.app.type_registry())
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("task_types_not_registered", error=first_line(exc))

    async def run(self) -> None:
        # First, before any connection: a port already in use is a one-line config error.
        if self.settings.metrics_port is not None:
            host, port = self.settings.metrics_host, self.settings.metrics_port
            self.metrics.serve(host, port)
            log.info("metrics_serving", host=host, port=port)
        # One connection per claimer, plus the completer and the reaper; it grows for progress
        # writes and, when there are idempotent async handlers, one per slot (each holds its
        # transaction open for the handler's run).
        pool_size = len(self.queues) + 2
        holds = any(t.options.idempotent and t.is_async for t in self.app.tasks.values())
        # Every connection to the main DSN (pool, heartbeat, scheduler, handlers) may go through
        # PgBouncer; only the notifier's LISTEN needs a session of its own (listen_dsn).
        conn_kwargs = pooler_kwargs(pgbouncer=self.settings.pgbouncer)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn,
            min_size=pool_size,
            max_size=pool_size + 4 + (sum(self.queues.values()) if holds else 0),
            kwargs={
                "autocommit": True,
                "application_name": application_name("worker"),
                **conn_kwargs,
            },
            # Not through PgBouncer: a session setting there belongs to no one in particular.
            configure=None if self.settings.pgbouncer else utc_by_name,
            open=False,
            name="taskq-worker",
            # Checked at checkout: after a restart or a terminated backend, no claim, completion
            # or async handler starts on a connection the server already closed.
            check=acheck_connection,
        )
        try:
            # One plain connection first: a refused or unknown database fails in milliseconds
            # with the server's own message, where the pool would retry until its timeout.
            probe = await aconnect(self.dsn, role="worker", **conn_kwargs)
            await probe.close()
            await pool.open(wait=True, timeout=15)
        except Exception as exc:
            await pool.close()
            raise unavailable(exc) from None
        loop = asyncio.get_running_loop()
        settings = self.settings
        memory = self.memory = (
            MemoryGuard(
                settings.max_memory_bytes,
                grace_seconds=settings.memory_grace_seconds,
                busy=self.threads_busy,
                on_give_up=self._memory_gave_up,
            )
            if settings.max_memory_bytes
            else None
        )
        if memory is not None:
            await memory.run_once()  # before the first claim
        self.heartbeat = Heartbeat(
            self.dsn,
            worker_id=self.worker_id,
            queues=self.queues,
            interval_seconds=settings.heartbeat_interval_seconds,
            lease_seconds=settings.lease_seconds,
            held=self._held,
            on_lost=lambda ids: _call_soon(loop, self._lease_lost, ids),
            on_strays=lambda strays: _call_soon(loop, self._strays, strays),
            on_abort=lambda ids: _call_soon(loop, self.aborts.request, ids),
            loop_silence=self._loop_silence,
            connect_kwargs=conn_kwargs,
            claiming_stopped=(lambda: memory.reason) if memory is not None else None,
            session_settings={} if self.settings.pgbouncer else store.PLANNER_SETTINGS,
        )
        try:
            await asyncio.to_thread(self.heartbeat.register)
            await self._register_types(pool)
        except Exception as exc:
            await pool.close()
            raise unavailable(exc) from None
        self.heartbeat.start()
        task_types = sorted(self.app.tasks)
        thread_pools = {
            q: ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"taskq-{q}")
            for q, slots in self.queues.items()
        }
        claims_in_flight = ClaimsInFlight()
        completer = self._completer = Completer(
            pool,
            self.app.options_for,
            worker_id=self.worker_id,
            wake=self._wake,
            metrics=self.metrics,
            breaker_threshold=settings.protection.breaker_threshold,
            log_payloads=settings.log_payloads,
            # Outcomes waiting to be written, at most about ten per slot: beyond that the
            # claimers wait (the database is slow to take writes; do not add to its load).
            capacity=COMPLETER_SLOTS_FACTOR * sum(self.queues.values()),
            claims_in_flight=claims_in_flight,
            pgbouncer=settings.pgbouncer,
        )
        # Tasks that ran beside a crash run alone, one at a time (isolator.py): its gate stops
        # every claimer of this process while it empties the process for one.
        isolator = self.isolator = Isolator(
            pool,
            task_types=task_types,
            completer=completer,
            interval_seconds=settings.poll_interval_seconds,
            threads_busy=self._threads_running,
        )
        control = self.control = ControlWatcher(
            pool, interval_seconds=settings.control_interval_seconds, on_change=self._wake_all
        )
        # The maintenance lease lasts half a worker lease (15 s by default): when the leader
        # dies, another worker leads (and reaps) before the dead one's attempts are due.
        elector = self.elector = Elector(
            pool,
            worker_id=self.worker_id,
            ttl_seconds=settings.lease_seconds / 2,
            renew_seconds=settings.lease_seconds / 6,
        )
        self.protection = ProtectionEvaluator(
            pool,
            settings.protection,
            worker_id=self.worker_id,
            on_change=lambda _before, _after: self.metrics.level_changes.inc(),
        )
        gauges = GaugeRefresher(
            pool, self.metrics, elector, control, interval_seconds=settings.gauge_interval_seconds
        )
        for queue, slots in self.queues.items():
            self.metrics.capacity.labels(queue).set(slots)
        runtime = WorkerRuntime(
            self.app,
            pool,
            dsn=self.dsn,
            sync_max_size=sum(self.queues.values()) + 2,
            connect_kwargs=conn_kwargs,
        )
        runtime.switches = lambda: control.state.switches
        self.scheduler = Scheduler(
            self.app, self.dsn, connect_kwargs=conn_kwargs, leader=elector, metrics=self.metrics
        )
        for queue, slots in self.queues.items():
            executor = Executor(
                runtime,
                log_payloads=settings.log_payloads,
                worker_id=self.worker_id,
                threads=thread_pools[queue],
                progress_interval_seconds=self.settings.progress_interval_seconds,
                aborts=self.aborts,
            )
            self._executors.append(executor)
            self.claimers[queue] = Claimer(
                queue=queue,
                slots=slots,
                handlers=[t.options for t in self.app.tasks.values()],
                pool=pool,
                executor=executor,
                report=completer.put,
                room=completer.room,
                on_lease_lost=completer.lease_lost,
                worker_id=self.worker_id,
                poll_interval_seconds=self.settings.poll_interval_seconds,
                memory_ok=memory,
                control=control,
                metrics=self.metrics,
                probe_timeout_seconds=settings.protection.probe_timeout_seconds,
                empty_probe_wait_seconds=settings.protection.empty_probe_wait_seconds,
                coalesce_seconds=settings.claim_coalesce_seconds,
                gate=isolator.gate,
                claims_in_flight=claims_in_flight,
            )
        isolator.claimers = self.claimers
        notifier = self.notifier = (
            Notifier(
                settings.listen_dsn or self.dsn,
                {
                    TASKS_CHANNEL: lambda payload: self._wake(
                        None if payload is None else parse_tasks_payload(payload)
                    ),
                    CONTROL_CHANNEL: lambda _payload: control.poke(),
                    ABORT_CHANNEL: self._abort_requested,
                },
            )
            if settings.listen
            else None
        )
        self.reaper = Reaper(
            pool,
            interval_seconds=settings.reaper_interval_seconds,
            grace_seconds=settings.timeout_grace_seconds,
            orphan_after_seconds=settings.lease_seconds,
            crash_limit=settings.crash_limit,
            metrics=self.metrics,
            leader=elector,
        )
        # Maintenance: every service below runs on the leader only (the one leader mechanism;
        # see leader.py). The reaper, the scheduler and the gauges are gated the same way.
        protection = Every(
            "protection",
            self.protection.run_once,
            interval_seconds=settings.protection.evaluate_interval_seconds,
            leader=elector,
        )
        statistics = Every(
            "statistics",
            functools.partial(self._analyze, pool),
            interval_seconds=STATISTICS_INTERVAL_SECONDS,
            leader=elector,
        )
        pruner = (
            Every("prune", self._prune, interval_seconds=PRUNE_INTERVAL_SECONDS, leader=elector)
            if settings.prune_after_seconds is not None
            else None
        )
        log.info(
            "worker_starting",
            worker_id=self.worker_id,
            queues=self.queues,
            task_types=task_types,
            event_loop=eventloop.loop_name(asyncio.get_running_loop()),
        )
        try:
            # The code's flow limits (max_running=, rate=, ...); an operator's rows stay as set.
            async with pool.connection() as conn:
                await store.limits_declare(
                    conn, [t.options for t in self.app.tasks.values()], worker_id=self.worker_id
                )
        except Exception:  # loop boundary: run with what the table holds; claims obey it anyway
            log.exception("limits_declare_failed")
        try:
            await control.refresh()  # obey pauses and the protection level from the first claim
        except Exception:  # the watcher retries; start with the defaults meanwhile
            log.warning("control_unavailable_at_start")
        try:
            async with asyncio.TaskGroup() as group:
                background = [
                    group.create_task(control.run(), name="taskq-control"),
                    group.create_task(elector.run(), name="taskq-elector"),
                    group.create_task(gauges.run(), name="taskq-gauges"),
                    group.create_task(protection.run(), name="taskq-protection"),
                    group.create_task(completer.run(), name="taskq-completer"),
                    group.create_task(self.reaper.run(), name="taskq-reaper"),
                    group.create_task(isolator.run(), name="taskq-isolator"),
                    group.create_task(self._tick(), name="taskq-tick"),
                    group.create_task(self.scheduler.run(), name="taskq-scheduler"),
                    group.create_task(statistics.run(), name="taskq-statistics"),
                ]
                if pruner is not None:
                    background.append(group.create_task(pruner.run(), name="taskq-prune"))
                if memory is not None:
                    background.append(group.create_task(memory.run(), name="taskq-memory"))
                if notifier is not None:
                    background.append(group.create_task(notifier.run(), name="taskq-notifier"))
                claiming = [
                    group.create_task(c.run(), name=f"taskq-claimer-{c.queue}")
                    for c in self.claimers.values()
                ]
                if notifier is not None:  # ready once wake-ups can arrive; polling needs nothing
                    await _first(notifier.connected.wait(), self._stop.wait())
                if not self._stop.is_set():
                    self.ready.set()
                    systemd.notify("READY=1")
                    log.info("worker_ready", worker_id=self.worker_id)
                await self._stop.wait()
                systemd.notify("STOPPING=1")
                await self._shutdown(claiming, completer)
                # Stop the services before giving the lease up, so that a renewal in flight
                # cannot re-elect us after we resign; it expires on its own if that fails.
                await _cancel_all(background)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):
                        await elector.resign()
        finally:
            # Unregister only when this worker holds nothing: a sync thread left running keeps
            # its row PROCESSING under this worker's id until the reaper rescues it.
            clean = not self.threads_busy() and not completer.pending
            await asyncio.to_thread(self.heartbeat.stop, unregister=clean)
            await asyncio.to_thread(runtime.close)
            await pool.close()
            for executor_threads in thread_pools.values():
                executor_threads.shutdown(wait=False, cancel_futures=True)
            self.stopped.set()
            log.info("worker_stopped", worker_id=self.worker_id)

    async def _shutdown(self, claiming: list[asyncio.Task[None]], completer: Completer) -> None:
        in_flight = sum(c.in_flight for c in self.claimers.values())
        log.info("worker_stopping", worker_id=self.worker_id, in_flight=in_flight)
        for claimer in self.claimers.values():
            claimer.stop()
        # Plain tasks, not gather(): a cancelled _GatheringFuture keeps its CancelledError as an
        # exception nobody retrieves, and asyncio logs it when the future is collected.
        idle = [asyncio.ensure_future(c.idle.wait()) for c in self.claimers.values()]
        forced: asyncio.Future[Any] = asyncio.ensure_future(self._force.wait())
        try:
            deadline = time.monotonic() + self.settings.shutdown_timeout_seconds
            pending: set[asyncio.Future[Any]] = set(idle)
            while pending and not forced.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _done, pending = await asyncio.wait(
                    pending | {forced}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(forced)
        finally:
            for waiter in idle:
                waiter.cancel()
        if not all(c.idle.is_set() for c in self.claimers.values()):
            log.warning("worker_interrupting", worker_id=self.worker_id)
            for claimer in self.claimers.values():
                claimer.interrupt(force=self._force.is_set())
        # Claimers end once every attempt has ended: cancelled async handlers at once, sync
        # threads when they finish (up to their own timeout), everything at a forced stop.
        try:
            running: set[asyncio.Future[Any]] = set(claiming)
            while running:
                if forced.done():
                    for claimer in self.claimers.values():
                        claimer.interrupt(force=True)
                    await asyncio.wait(running)
                    break
                _done, running = await asyncio.wait(
                    running | {forced}, return_when=asyncio.FIRST_COMPLETED
                )
                running.discard(forced)
        finally:
            forced.cancel()
        for task in claiming:
            if not task.cancelled() and task.exception() is not None:
                log.error("claimer_failed", error=repr(task.exception()))
        try:
            async with asyncio.timeout(max(5.0, self.settings.shutdown_timeout_seconds)):
                await completer.drain()
        except TimeoutError:
            log.error("completions_not_written", pending=completer.pending)

    def _abort_requested(self, payload: str | None) -> None:
        """NOTIFY taskq_abort (or None after a reconnect: the heartbeat catches up)."""
        if payload is None:
            return
        request = parse_abort_payload(payload)
        if request is not None and request[1] in (None, self.worker_id):
            self.aborts.request([request[0]])

    def _lease_lost(self, task_ids: list[int]) -> None:
        for claimer in self.claimers.values():
            claimer.lease_lost(task_ids)

    def _threads_running(self) -> bool:
        """Sync threads this worker stopped waiting for (past their timeout) still run."""
        return any(e.threads_running for e in self._executors)

    def threads_busy(self) -> bool:
        """Attempts still occupy this worker: in flight, or sync threads it stopped waiting for.
        A process that runs the worker should then exit rather than wait for them (``taskq
        worker`` does)."""
        return any(c.in_flight for c in self.claimers.values()) or any(
            e.threads_running for e in self._executors
        )


async def _first(*aws: Any) -> None:
    """Wait until the first of several awaitables finishes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks and wait until every one is done. A cancellation can be lost (a pool
    that hands over a connection in the same instant returns it instead of raising), so a task
    still running a second later is cancelled again."""
    while pending := [t for t in tasks if not t.done()]:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=1.0)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Hand a call from another thread to the event loop (ignored once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
