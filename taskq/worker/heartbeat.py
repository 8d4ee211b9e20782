"""The heartbeat: this worker's lease, kept fresh from a thread with its own connection.

A thread rather than an asyncio task, so that nothing a handler does (a CPU-bound sync
handler hogging the GIL between switches, an async handler blocking the event loop) can
starve it for long. Each beat also compares what the database says this worker holds with what
it runs: it presents the tokens of the attempts it runs and learns which were taken away
(``on_lost``) and which rows are held under its id although nothing here runs them
(``on_strays``: a claim whose reply was lost; the completer gives them back, uncharged).
The same thread feeds systemd's watchdog, but only while the event loop is demonstrably alive,
so a wedged loop gets the process restarted.
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

from taskq.backoff import Backoff
from taskq.db import store
from taskq.db.connection import connect, first_line, set_config
from taskq.service import OUTAGE_ERRORS, Outage
from taskq.worker import systemd
from taskq.worker.memory import rss_bytes

log = structlog.get_logger("taskq.worker.heartbeat")

Held = Callable[[], Sequence[tuple[int, uuid.UUID]]]


def taskq_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("taskq")
    except PackageNotFoundError:
        return "unknown"


class Heartbeat:
    """The one service that is a thread, not an asyncio task (see above); it shares the
    services' outage logging (``Outage``) and has a ``run_once`` (one beat) like them."""

    name = "heartbeat"

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
        on_strays: Callable[[list[tuple[int, uuid.UUID]]], None] | None = None,
        loop_silence: Callable[[], float],
        connect_kwargs: Mapping[str, Any] | None = None,
        claiming_stopped: Callable[[], str | None] | None = None,
        on_abort: Callable[[list[int]], None] | None = None,
        session_settings: Mapping[str, str] | None = None,
    ) -> None:
        self._dsn = dsn
        # The beat's statements are prepared on this connection of its own: planned with these
        # (store.PLANNER_SETTINGS), a plan made on a small table cannot read the whole table at
        # every beat once it grew.
        self._session_settings = dict(session_settings or {})
        self._on_abort = on_abort
        self._connect_kwargs = dict(connect_kwargs or {})
        self._worker_id = worker_id
        self._queues_json = json.dumps(queues)
        self._interval = interval_seconds
        self.lease_seconds = lease_seconds
        self._held = held
        self._on_lost = on_lost
        self._on_strays = on_strays
        self._loop_silence = loop_silence
        self._claiming_stopped = claiming_stopped
        self._watchdog = systemd.watchdog_seconds()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._version = taskq_version()
        self.outage = Outage(self.name)

    def register(self) -> None:
        """The first beat, before any claim: a worker is present before it holds anything."""
        self.run_once()

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
            conn = connect(self._dsn, role="heartbeat", autocommit=True, **self._connect_kwargs)
            try:
                if self._session_settings:
                    conn.execute(set_config(self._session_settings, local=False))
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def run_once(self) -> list[int]:
        """One beat: refresh the lease, hand the attempts taken away to ``on_lost``."""
        held = list(self._held())
        lost, strays = store.worker_heartbeat(
            self._connection(),
            worker_id=self._worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues_json=self._queues_json,
            version=self._version,
            lease_seconds=self.lease_seconds,
            held=held,
            claiming_stopped=self._claiming_stopped() if self._claiming_stopped else None,
        )
        # For the dashboard's workers page; a separate statement, so the lease's never waits on it.
        store.report_memory(self._connection(), self._worker_id, rss_bytes())
        if lost:
            self._on_lost(lost)
        if strays and self._on_strays is not None:
            self._on_strays(strays)
        if held and self._on_abort is not None:
            # The fallback for a lost NOTIFY taskq_abort: one indexed look-up of what we hold.
            aborted = store.aborts_requested(self._connection(), held)
            if aborted:
                self._on_abort(aborted)
        return lost

    def _run(self) -> None:
        tick = self._interval if self._watchdog is None else min(self._interval, self._watchdog / 3)
        backoff = Backoff(initial=0.2, cap=self._interval)
        next_beat = time.monotonic() + self._interval
        while not self._stop.wait(tick):
            if self._watchdog is not None and self._loop_silence() < self._watchdog / 2:
                systemd.notify("WATCHDOG=1")
            if time.monotonic() < next_beat:
                continue
            try:
                self.run_once()
            except OUTAGE_ERRORS as exc:
                self.outage.failed(exc)
                self._close()
                next_beat = time.monotonic() + backoff.next_delay()
                continue
            except Exception:  # loop boundary: keep beating once the database is back
                log.exception("service_failed", service=self.name)
                self._close()
                next_beat = time.monotonic() + backoff.next_delay()
                continue
            self.outage.recovered()
            backoff.reset()
            next_beat = time.monotonic() + self._interval
