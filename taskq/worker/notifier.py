"""The Notifier: one dedicated LISTEN connection that wakes the claimers.

NOTIFY is only a hint (the claim query is the truth), so the notifier can afford to be simple:
callbacks only set events, a lost connection is re-opened with capped, jittered backoff, and
after every reconnect *all* queues are woken once, because notifications sent while we were
away are gone.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

import psycopg
import structlog

from taskq.backoff import Backoff
from taskq.db import store
from taskq.db.connection import aconnect
from taskq.service import OUTAGE_ERRORS, Service

log = structlog.get_logger("taskq.worker.notifier")

TASKS_CHANNEL = "taskq_tasks"
ABORT_CHANNEL = "taskq_abort"

Listener = Callable[[str | None], bool | None]
"""Called with a notification's payload, or None after a reconnect (something may have been
missed: behave as if everything changed). True: it woke a task (a claimer), which then runs
before the notifier reads on."""


@functools.lru_cache(maxsize=256)
def parse_tasks_payload(payload: str) -> list[str] | None:
    """The trigger sends a JSON array of queue names, or ``*`` for all queues. Cached: a burst
    of inserts (or a NOTIFY flood) repeats the same few payloads. Callers must not mutate the
    list."""
    if payload == "*":
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(q, str) for q in value):
        return value
    return None


def parse_abort_payload(payload: str) -> tuple[int, str | None] | None:
    """``{"id": 42, "worker_id": "host-1-abc"}`` (taskq.cancel_v1) -> (42, "host-1-abc")."""
    try:
        value = json.loads(payload)
        task_id = int(value["id"])
    except (ValueError, KeyError, TypeError):
        return None
    worker = value.get("worker_id")
    return task_id, worker if isinstance(worker, str) else None


class Notifier(Service):
    """A ``Service``: ``run_once`` is one LISTEN session, ``run`` re-opens it for ever."""

    name = "notifier"

    def __init__(
        self, dsn: str, listeners: dict[str, Listener], *, keepalive_seconds: int = 10
    ) -> None:
        super().__init__()
        self._dsn = dsn
        self._listeners = listeners
        self._keepalive = keepalive_seconds
        self.connected = asyncio.Event()
        self.reconnected = asyncio.Event()  # set at every re-connection after the first
        self.sessions = 0
        self.notifications = 0
        self._backoff = Backoff(initial=0.1, cap=5.0)
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except OUTAGE_ERRORS as exc:
                self.outage.failed(exc)
            except Exception:  # loop boundary: whatever the driver raised, listen again
                log.exception("service_failed", service=self.name)
            await asyncio.sleep(self._backoff.next_delay())

    async def run_once(self) -> None:
        """Connect, LISTEN, wake everyone once, then hand each notification to its listener
        until the connection drops (raises) or closes (returns)."""
        conn = await aconnect(
            self._dsn,
            role="listen",
            autocommit=True,
            keepalives=1,
            keepalives_idle=self._keepalive,
            keepalives_interval=max(1, self._keepalive // 3),
            keepalives_count=3,
        )
        try:
            async with conn:
                self._conn = conn
                for channel in self._listeners:
                    await store.listen(conn, channel)
                self.connected.set()
                self._backoff.reset()
                if self.sessions:
                    self.reconnected.set()
                    log.info("notifier_reconnected")
                self.sessions += 1
                self.outage.recovered()
                # Anything sent while we were not listening is lost: look once everywhere.
                for listener in self._listeners.values():
                    listener(None)
                listeners = self._listeners
                async for notify in conn.notifies():
                    self.notifications += 1
                    on_notify = listeners.get(notify.channel)
                    if on_notify is not None and on_notify(notify.payload):
                        # Let the woken claimer send its claim before this loop waits on the
                        # socket again (~0.1 ms at idle, where that wait's set-up ran first).
                        # Only when it woke one: in a NOTIFY flood most find it awake already.
                        await asyncio.sleep(0)
        finally:
            self._conn = None
            self.connected.clear()
