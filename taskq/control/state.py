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

from taskq.db import store
from taskq.service import PeriodicService

log = structlog.get_logger("taskq.control.state")

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
    switches: dict[str, bool] = field(default_factory=dict)  # business switches, name -> on

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ControlState:
        pauses = row["pauses"] or []
        return cls(
            paused_queues=frozenset(p["name"] for p in pauses if p["kind"] == "queue"),
            paused_types=frozenset(p["name"] for p in pauses if p["kind"] == "task_type"),
            breakers={b["task_type"]: b["state"] for b in row["breakers"] or []},
            level=Level(int(row["level"] or 0)),
            switches={str(k): bool(v) for k, v in (row.get("switches") or {}).items()},
        )


class ControlWatcher(PeriodicService):
    """Keeps ``state`` fresh; ``on_change`` is called whenever it changes (claimers wake)."""

    name = "control"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        interval_seconds: float = 1.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        # Anyone who can connect can NOTIFY taskq_control: however many arrive, re-reads start
        # at least 5 ms apart (the claimers' coalescing), and a real change waits no longer.
        super().__init__(interval_seconds=interval_seconds, jitter=0.0, coalesce_seconds=0.005)
        self._pool = pool
        self._on_change = on_change
        self.state = ControlState()
        self.refreshed = asyncio.Event()

    def poke(self, _payload: str | None = None) -> None:
        """A NOTIFY on taskq_control arrived (or the listener reconnected): re-read now."""
        self.wake()

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
                switches=state.switches,
            )
        self.state = state
        self.refreshed.set()
        if changed and self._on_change is not None:
            self._on_change()  # e.g. a resume: claimers look again at once
        return state

    async def run_once(self) -> ControlState:
        return await self.refresh()
