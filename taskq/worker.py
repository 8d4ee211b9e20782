"""The Worker: the composition root of one worker process.

Start order: pool -> notifier -> completer -> claimers (one per queue) -> ready. SIGTERM (via
``request_stop``): stop claiming at once, let in-flight attempts finish for up to the shutdown
timeout, then cancel what is left and give it back (PENDING, attempt not charged), flush the
completer, close. ``request_stop(force=True)`` (a second signal) skips the wait.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq.app import App
from taskq.claimer import Claimer
from taskq.completer import Completer
from taskq.db import application_name, unavailable
from taskq.errors import ConfigError
from taskq.executor import Executor
from taskq.model import check_name
from taskq.notifier import Notifier

log = structlog.get_logger("taskq.worker")

DEFAULT_CONCURRENCY = 10


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Tunables of one worker process. Defaults suit production; tests shrink them."""

    queues: dict[str, int] = field(default_factory=dict)
    poll_interval_seconds: float = 2.0
    shutdown_timeout_seconds: float = 30.0
    progress_interval_seconds: float = 0.25


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
        self.queues = dict(self.settings.queues) or {
            t.options.queue: DEFAULT_CONCURRENCY for t in app.tasks.values()
        }
        self.worker_id = worker_id or new_worker_id()
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self.claimers: dict[str, Claimer] = {}

    def request_stop(self, *, force: bool = False) -> None:
        """Begin a graceful shutdown; ``force`` gives back in-flight tasks at once."""
        if self._stop.is_set():
            force = True  # a second request means "now"
        self._stop.set()
        if force:
            self._force.set()
            for claimer in self.claimers.values():
                claimer.interrupt()

    def _wake(self, queues: list[str] | None) -> None:
        if queues is None:
            for claimer in self.claimers.values():
                claimer.wake()
            return
        for name in queues:
            if name in self.claimers:
                self.claimers[name].wake()

    async def run(self) -> None:
        pool_size = len(self.queues) + 2
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn,
            min_size=pool_size,
            max_size=pool_size + 2,
            kwargs={"autocommit": True, "application_name": application_name("worker")},
            open=False,
            name="taskq-worker",
        )
        try:
            await pool.open(wait=True, timeout=15)
        except Exception as exc:
            await pool.close()
            raise unavailable(exc) from None
        task_types = sorted(self.app.tasks)
        thread_pools = {
            q: ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"taskq-{q}")
            for q, slots in self.queues.items()
        }
        completer = Completer(pool, self.app.options_for, worker_id=self.worker_id)
        for queue, slots in self.queues.items():
            executor = Executor(
                self.app,
                pool,
                worker_id=self.worker_id,
                threads=thread_pools[queue],
                progress_interval_seconds=self.settings.progress_interval_seconds,
            )
            self.claimers[queue] = Claimer(
                queue=queue,
                slots=slots,
                task_types=task_types,
                pool=pool,
                executor=executor,
                report=completer.put,
                worker_id=self.worker_id,
                poll_interval_seconds=self.settings.poll_interval_seconds,
            )
        notifier = Notifier(self.dsn, self._wake)
        log.info(
            "worker_starting",
            worker_id=self.worker_id,
            queues=self.queues,
            task_types=task_types,
        )
        try:
            async with asyncio.TaskGroup() as group:
                background = [
                    group.create_task(notifier.run(), name="taskq-notifier"),
                    group.create_task(completer.run(), name="taskq-completer"),
                ]
                claiming = [
                    group.create_task(c.run(), name=f"taskq-claimer-{c.queue}")
                    for c in self.claimers.values()
                ]
                await _first(notifier.connected.wait(), self._stop.wait())
                if not self._stop.is_set():
                    self.ready.set()
                    log.info("worker_ready", worker_id=self.worker_id)
                await self._stop.wait()
                await self._shutdown(claiming, completer)
                for task in background:
                    task.cancel()
        finally:
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
