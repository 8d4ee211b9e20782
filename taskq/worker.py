"""The Worker: the composition root of one worker process.

Start order: pool -> heartbeat (registers the worker) -> notifier, completer, reaper, claimers
(one per queue) -> ready (systemd READY=1). SIGTERM (via ``request_stop``): STOPPING=1, stop
claiming at once, let in-flight attempts finish for up to the shutdown timeout, then cancel
what is left and give it back (PENDING, attempt not charged), flush the completer, unregister,
close. ``request_stop(force=True)`` (or a second request) skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import prune, systemd
from taskq.app import App
from taskq.backoff import jittered
from taskq.claimer import Claimer
from taskq.completer import Completer
from taskq.control import CONTROL_CHANNEL, ControlWatcher
from taskq.db import ConnectionError_, aconnect, application_name, pooler_kwargs, unavailable
from taskq.errors import ConfigError
from taskq.executor import Executor
from taskq.heartbeat import Heartbeat
from taskq.leader import Elector
from taskq.memory import MemoryGuard
from taskq.metrics import GaugeRefresher, Metrics
from taskq.model import check_name
from taskq.notifier import TASKS_CHANNEL, Notifier, parse_tasks_payload
from taskq.protection import ProtectionEvaluator, ProtectionSettings
from taskq.reaper import Reaper
from taskq.runtime import WorkerRuntime
from taskq.scheduler import Scheduler

log = structlog.get_logger("taskq.worker")

DEFAULT_CONCURRENCY = 10
PRUNE_INTERVAL_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Tunables of one worker process. Defaults suit production; tests shrink them."""

    queues: dict[str, int] = field(default_factory=dict)
    poll_interval_seconds: float = 2.0
    shutdown_timeout_seconds: float = 30.0
    progress_interval_seconds: float = 0.25
    heartbeat_interval_seconds: float = 10.0
    """The lease is three heartbeats: a dead worker's attempts are rescued ~30 s after it died."""
    reaper_interval_seconds: float = 5.0
    timeout_grace_seconds: float = 10.0
    """The reaper rescues an attempt this long after its timeout (the owner enforces it first)."""
    max_memory_bytes: int | None = None
    pgbouncer: bool = False
    """Connections go through PgBouncer in transaction mode: never prepare statements
    server-side (``db.pooler_kwargs`` says why). LISTEN then needs ``listen_dsn`` or no LISTEN."""
    listen: bool = True
    """LISTEN for wake-ups. Without it the worker only polls: a new task can wait up to
    ``poll_interval_seconds`` (plus jitter) before it is claimed."""
    listen_dsn: str | None = None
    """Where to LISTEN: a direct connection to PostgreSQL, because LISTEN is session state that a
    transaction pooler cannot keep. None: the worker's own DSN."""
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    prune_after_seconds: float | None = None
    """Delete SUCCESS rows older than this (leader only, every 10 minutes); None keeps all."""
    protection: ProtectionSettings = field(default_factory=ProtectionSettings)
    control_interval_seconds: float = 1.0
    gauge_interval_seconds: float = 10.0
    log_payloads: bool = False
    """Payloads are never logged unless this is set (they may hold personal data)."""

    @property
    def lease_seconds(self) -> float:
        return 3 * self.heartbeat_interval_seconds


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
        self.dsn = dsn or app.dsn
        self.settings = settings or WorkerSettings()
        check_listen(self.settings)
        self.queues = dict(self.settings.queues) or {
            t.options.queue: DEFAULT_CONCURRENCY for t in app.tasks.values()
        }
        self.worker_id = worker_id or new_worker_id()
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self.claimers: dict[str, Claimer] = {}
        self.reaper: Reaper | None = None
        self.heartbeat: Heartbeat | None = None
        self.notifier: Notifier | None = None
        self.scheduler: Scheduler | None = None
        self.metrics = Metrics()
        self.control: ControlWatcher | None = None
        self.elector: Elector | None = None
        self.protection: ProtectionEvaluator | None = None
        self._loop_tick = time.monotonic()

    def request_stop(self, *, force: bool = False) -> None:
        """Begin a graceful shutdown; ``force`` gives back in-flight tasks at once."""
        if self._stop.is_set():
            force = True  # a second request means "now"
        self._stop.set()
        if force:
            self._force.set()
            for claimer in self.claimers.values():
                claimer.interrupt()

    def _held(self) -> list[tuple[int, uuid.UUID]]:
        return [held for claimer in list(self.claimers.values()) for held in claimer.held()]

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

    def _wake_all(self) -> None:
        self._wake(None)

    def _wake(self, queues: list[str] | None) -> None:
        if queues is None:
            for claimer in self.claimers.values():
                claimer.wake()
            return
        for name in queues:
            if name in self.claimers:
                self.claimers[name].wake()

    async def run(self) -> None:
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
            open=False,
            name="taskq-worker",
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
        self.heartbeat = Heartbeat(
            self.dsn,
            worker_id=self.worker_id,
            queues=self.queues,
            interval_seconds=settings.heartbeat_interval_seconds,
            lease_seconds=settings.lease_seconds,
            held=self._held,
            on_lost=lambda ids: _call_soon(loop, self._lease_lost, ids),
            loop_silence=self._loop_silence,
            connect_kwargs=conn_kwargs,
        )
        try:
            await asyncio.to_thread(self.heartbeat.register)
        except Exception as exc:
            await pool.close()
            raise unavailable(exc) from None
        self.heartbeat.start()
        memory_ok = MemoryGuard(settings.max_memory_bytes) if settings.max_memory_bytes else None
        task_types = sorted(self.app.tasks)
        thread_pools = {
            q: ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"taskq-{q}")
            for q, slots in self.queues.items()
        }
        completer = Completer(
            pool,
            self.app.options_for,
            worker_id=self.worker_id,
            wake=self._wake,
            metrics=self.metrics,
            breaker_threshold=settings.protection.breaker_threshold,
            log_payloads=settings.log_payloads,
        )
        control = self.control = ControlWatcher(
            pool, interval_seconds=settings.control_interval_seconds, on_change=self._wake_all
        )
        elector = self.elector = Elector(pool, worker_id=self.worker_id)
        self.protection = ProtectionEvaluator(pool, settings.protection, worker_id=self.worker_id)
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
        self.scheduler = Scheduler(self.app, self.dsn, connect_kwargs=conn_kwargs)
        for queue, slots in self.queues.items():
            executor = Executor(
                runtime,
                log_payloads=settings.log_payloads,
                worker_id=self.worker_id,
                threads=thread_pools[queue],
                progress_interval_seconds=self.settings.progress_interval_seconds,
            )
            self.claimers[queue] = Claimer(
                queue=queue,
                slots=slots,
                handlers=[t.options for t in self.app.tasks.values()],
                pool=pool,
                executor=executor,
                report=completer.put,
                worker_id=self.worker_id,
                poll_interval_seconds=self.settings.poll_interval_seconds,
                memory_ok=memory_ok,
                control=control,
                metrics=self.metrics,
                probe_timeout_seconds=settings.protection.probe_timeout_seconds,
            )
        notifier = self.notifier = (
            Notifier(
                settings.listen_dsn or self.dsn,
                {
                    TASKS_CHANNEL: lambda payload: self._wake(
                        None if payload is None else parse_tasks_payload(payload)
                    ),
                    CONTROL_CHANNEL: lambda _payload: control.poke(),
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
            metrics=self.metrics,
        )
        if settings.metrics_port is not None:
            self.metrics.serve(settings.metrics_host, settings.metrics_port)
            log.info("metrics_serving", host=settings.metrics_host, port=settings.metrics_port)
        log.info(
            "worker_starting",
            worker_id=self.worker_id,
            queues=self.queues,
            task_types=task_types,
        )
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
                    group.create_task(
                        _while_leader(
                            elector,
                            self.protection.run_once,
                            settings.protection.evaluate_interval_seconds,
                            "protection",
                        ),
                        name="taskq-protection",
                    ),
                    group.create_task(
                        _while_leader(elector, self._prune, PRUNE_INTERVAL_SECONDS, "prune"),
                        name="taskq-prune",
                    ),
                    group.create_task(completer.run(), name="taskq-completer"),
                    group.create_task(self.reaper.run(), name="taskq-reaper"),
                    group.create_task(self._tick(), name="taskq-tick"),
                    group.create_task(self.scheduler.run(), name="taskq-scheduler"),
                ]
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
                for task in background:
                    task.cancel()
                await elector.resign()
        finally:
            clean = not any(c.in_flight for c in self.claimers.values()) and not completer.pending
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
        all_idle = asyncio.gather(*(c.idle.wait() for c in self.claimers.values()))
        try:
            async with asyncio.timeout(self.settings.shutdown_timeout_seconds):
                await _first(all_idle, self._force.wait())
        except TimeoutError:
            pass
        if not all(c.idle.is_set() for c in self.claimers.values()):
            log.warning("worker_interrupting", worker_id=self.worker_id)
            for claimer in self.claimers.values():
                claimer.interrupt()
        await asyncio.gather(*claiming, return_exceptions=True)
        try:
            async with asyncio.timeout(max(5.0, self.settings.shutdown_timeout_seconds)):
                await completer.drain()
        except TimeoutError:
            log.error("completions_not_written", pending=completer.pending)

    def _lease_lost(self, task_ids: list[int]) -> None:
        for claimer in self.claimers.values():
            claimer.lease_lost(task_ids)

    def threads_busy(self) -> bool:
        return any(c.in_flight for c in self.claimers.values())


async def _first(*aws: Any) -> None:
    """Wait until the first of several awaitables finishes; cancel the rest."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()


async def _while_leader(elector: Elector, job: Any, interval: float, name: str) -> None:
    """Run ``job()`` every ``interval`` seconds while this worker is the leader."""
    while True:
        await elector.elected.wait()
        try:
            await job()
        except ConnectionError_:
            pass  # the outage is reported by the claimers
        except Exception:  # loop boundary
            log.exception("leader_job_failed", job=name)
        await asyncio.sleep(jittered(interval, 0.1))


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """Hand a call from another thread to the event loop (ignored once the loop is closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
