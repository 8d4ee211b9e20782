"""The control state every claimer obeys: pause switches, circuit breakers, the protection
level. Kept in the database so all workers agree; each worker caches it, re-reads it when
NOTIFY taskq_control says it changed, and every second anyway (a lost notification costs at
most that)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import store
from taskq.db import ConnectionError_, first_line

log = structlog.get_logger("taskq.control")

CONTROL_CHANNEL = "taskq_control"


class Level(IntEnum):
    NORMAL = 0  # L0
    WARNING = 1  # L1: smaller claim batches, alert
    DEGRADED = 2  # L2: concurrency halved, only essential task types
    CIRCUIT_OPEN = 3  # L3: new work paused, retries only
    EMERGENCY = 4  # L4: dispatch stopped until an operator resets


@dataclass(frozen=True, slots=True)
class ControlState:
    paused_queues: frozenset[str] = frozenset()
    paused_types: frozenset[str] = frozenset()
    breakers: dict[str, str] = field(default_factory=dict)  # task_type -> OPEN / HALF_OPEN
    level: Level = Level.NORMAL

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ControlState:
        pauses = row["pauses"] or []
        return cls(
            paused_queues=frozenset(p["name"] for p in pauses if p["kind"] == "queue"),
            paused_types=frozenset(p["name"] for p in pauses if p["kind"] == "task_type"),
            breakers={b["task_type"]: b["state"] for b in row["breakers"] or []},
            level=Level(int(row["level"] or 0)),
        )


class ControlWatcher:
    """Keeps ``state`` fresh; ``changed`` is set whenever it changes (claimers wake on it)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        interval_seconds: float = 1.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._pool = pool
        self._interval = interval_seconds
        self._on_change = on_change
        self._poke = asyncio.Event()
        self.state = ControlState()
        self.refreshed = asyncio.Event()

    def poke(self, _payload: str | None = None) -> None:
        """A NOTIFY on taskq_control arrived (or the listener reconnected): re-read now."""
        self._poke.set()

    async def refresh(self) -> ControlState:
        async with self._pool.connection() as conn:
            row = await store.control_state(conn)
        state = ControlState.from_row(row)
        changed = state != self.state
        if changed:
            log.info(
                "control_changed",
                paused_queues=sorted(state.paused_queues),
                paused_types=sorted(state.paused_types),
                breakers=state.breakers,
                level=int(state.level),
            )
        self.state = state
        self.refreshed.set()
        if changed and self._on_change is not None:
            self._on_change()  # e.g. a resume: claimers look again at once
        return state

    async def run(self) -> None:
        outage_logged = False
        while True:
            self._poke.clear()
            try:
                await self.refresh()
                outage_logged = False
            except ConnectionError_ as exc:
                if not outage_logged:
                    log.warning("control_unavailable", error=first_line(exc))
                    outage_logged = True
            except Exception:  # loop boundary
                log.exception("control_refresh_failed")
            try:
                async with asyncio.timeout(self._interval):
                    await self._poke.wait()
            except TimeoutError:
                pass
