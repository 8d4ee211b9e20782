"""The Notifier: one dedicated LISTEN connection that wakes the claimers.

NOTIFY is only a hint (the claim query is the truth), so the notifier can afford to be simple:
callbacks only set events, a lost connection is re-opened with capped, jittered backoff, and
after every reconnect *all* queues are woken once, because notifications sent while we were
away are gone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import psycopg
import structlog

from taskq import store
from taskq.backoff import Backoff
from taskq.db import ConnectionError_, aconnect, first_line

log = structlog.get_logger("taskq.notifier")

TASKS_CHANNEL = "taskq_tasks"

Listener = Callable[[str | None], None]
"""Called with a notification's payload, or None after a reconnect (something may have been
missed: behave as if everything changed)."""


def parse_tasks_payload(payload: str) -> list[str] | None:
    """The trigger sends a JSON array of queue names, or ``*`` for all queues."""
    if payload == "*":
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(q, str) for q in value):
        return value
    return None


class Notifier:
    def __init__(
        self, dsn: str, listeners: dict[str, Listener], *, keepalive_seconds: int = 10
    ) -> None:
        self._dsn = dsn
        self._listeners = listeners
        self._keepalive = keepalive_seconds
        self.connected = asyncio.Event()
        self.reconnected = asyncio.Event()  # set at every re-connection after the first
        self.reconnects = 0
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def run(self) -> None:
        backoff = Backoff(initial=0.1, cap=5.0)
        outage_logged = False
        first = True
        while True:
            try:
                conn = await aconnect(
                    self._dsn,
                    role="listen",
                    autocommit=True,
                    keepalives=1,
                    keepalives_idle=self._keepalive,
                    keepalives_interval=max(1, self._keepalive // 3),
                    keepalives_count=3,
                )
            except Exception as exc:  # DatabaseUnavailable or anything the driver raised
                if not outage_logged:
                    log.warning("notifier_disconnected", error=first_line(exc))
                    outage_logged = True
                self.connected.clear()
                await asyncio.sleep(backoff.next_delay())
                continue
            try:
                async with conn:
                    self._conn = conn
                    for channel in self._listeners:
                        await store.listen(conn, channel)
                    self.connected.set()
                    backoff.reset()
                    if not first:
                        self.reconnects += 1
                        self.reconnected.set()
                        log.info("notifier_reconnected")
                    outage_logged = False
                    # Anything sent while we were not listening is lost: look once everywhere.
                    for listener in self._listeners.values():
                        listener(None)
                    first = False
                    async for notify in conn.notifies():
                        on_notify = self._listeners.get(notify.channel)
                        if on_notify is not None:
                            on_notify(notify.payload)
            except ConnectionError_ as exc:
                self.connected.clear()
                if not outage_logged:
                    log.warning("notifier_disconnected", error=first_line(exc))
                    outage_logged = True
                await asyncio.sleep(backoff.next_delay())
            finally:
                self._conn = None
                self.connected.clear()
