"""The heartbeat: this worker's lease, kept fresh from a thread with its own connection.

A thread rather than an asyncio task, so that nothing a handler does (a CPU-bound sync
handler hogging the GIL between switches, an async handler blocking the event loop) can
starve it for long. Each beat also presents the tokens of the attempts the worker believes it
holds and learns which were taken away. The same thread feeds systemd's watchdog, but only
while the event loop is demonstrably alive, so a wedged loop gets the process restarted.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
import structlog

from taskq import store, systemd
from taskq.backoff import Backoff
from taskq.db import ConnectionError_, connect, first_line

log = structlog.get_logger("taskq.heartbeat")

Held = Callable[[], Sequence[tuple[int, uuid.UUID]]]


def taskq_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("taskq")
    except PackageNotFoundError:
        return "unknown"


class Heartbeat:
    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str,
        queues: dict[str, int],
        interval_seconds: float,
        lease_seconds: float,
        held: Held,
        on_lost: Callable[[list[int]], None],
        loop_silence: Callable[[], float],
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._dsn = dsn
        self._connect_kwargs = dict(connect_kwargs or {})
        self._worker_id = worker_id
        self._queues_json = json.dumps(queues)
        self._interval = interval_seconds
        self.lease_seconds = lease_seconds
        self._held = held
        self._on_lost = on_lost
        self._loop_silence = loop_silence
        self._watchdog = systemd.watchdog_seconds()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._version = taskq_version()
        self.beats = 0

    def register(self) -> None:
        """The first beat, before any claim: a worker is present before it holds anything."""
        self._beat()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="taskq-heartbeat", daemon=True)
        self._thread.start()

    def stop(self, *, unregister: bool) -> None:
        """Stop beating; on a clean exit delete the worker row (it holds nothing now)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            if unregister:
                conn = self._connection()
                store.worker_unregister(conn, self._worker_id)
        except Exception as exc:  # best effort: a stale row is reaped like a dead worker's
            log.warning("worker_unregister_failed", error=first_line(exc))
        finally:
            self._close()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(
                self._dsn, role="heartbeat", autocommit=True, **self._connect_kwargs
            )
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _beat(self) -> None:
        held = list(self._held())
        lost = store.worker_heartbeat(
            self._connection(),
            worker_id=self._worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues_json=self._queues_json,
            version=self._version,
            lease_seconds=self.lease_seconds,
            held=held,
        )
        self.beats += 1
        if lost:
            self._on_lost(lost)

    def _run(self) -> None:
        tick = self._interval if self._watchdog is None else min(self._interval, self._watchdog / 3)
        backoff = Backoff(initial=0.2, cap=self._interval)
        next_beat = time.monotonic() + self._interval
        outage_logged = False
        while not self._stop.wait(tick):
            if self._watchdog is not None and self._loop_silence() < self._watchdog / 2:
                systemd.notify("WATCHDOG=1")
            if time.monotonic() < next_beat:
                continue
            try:
                self._beat()
            except Exception as exc:  # loop boundary: keep beating once the database is back
                if not outage_logged:
                    level = log.warning if isinstance(exc, ConnectionError_) else log.exception
                    level("heartbeat_failed", error=first_line(exc))
                    outage_logged = True
                self._close()
                next_beat = time.monotonic() + backoff.next_delay()
                continue
            if outage_logged:
                log.info("heartbeat_resumed")
                outage_logged = False
            backoff.reset()
            next_beat = time.monotonic() + self._interval
