"""Circuit breakers and the adaptive protection level.

Per task type, a breaker opens after ``breaker_threshold`` consecutive failures (counted in
the failure's own statement, see sql/queries/finish.sql) or when the failure rate over a window
is too high; an open breaker's tasks wait (they are not claimed, not failed). After a
cool-down it goes HALF_OPEN: exactly one worker wins the probe and runs one task; success
closes the breaker, failure re-opens it. A reset or a close starts a fresh failure-rate window
(``breakers.window_from``). ``taskq.Permanent`` (a bad task) is no failure here, and a
``breaker_threshold`` of 0 turns breakers off.

Globally, the number of task types whose breaker is OPEN, or HALF_OPEN with something to probe,
sets the level, shared by all workers through the database:

    L0 NORMAL        everything runs
    L1 WARNING       claim batches halved; alert
    L2 DEGRADED      concurrency halved; only essential task types (@app.task(essential=True))
    L3 CIRCUIT_OPEN  new work paused: only retries (FAILED rows) are claimed
    L4 EMERGENCY     nothing is claimed until an operator runs `taskq circuit reset`

The level rises at once and falls one step at a time after ``calm_seconds`` below the
threshold (hysteresis), except L4, which only an operator lowers. The evaluator runs on the
leader only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq.control.state import ControlState, Level
from taskq.db import store
from taskq.model import TaskOptions
from taskq.settings import ProtectionSettings

log = structlog.get_logger("taskq.protection")


def level_for(failing_types: int, thresholds: tuple[int, int, int, int]) -> Level:
    level = Level.NORMAL
    for step, needed in enumerate(thresholds, start=1):
        if failing_types >= needed:
            level = Level(step)
    return level


@dataclass(frozen=True, slots=True)
class Policy:
    """What one claim of one queue may take under the current control state."""

    handlers: list[TaskOptions]
    limit: int
    retries_only: bool = False
    probes: tuple[str, ...] = ()  # HALF_OPEN types this claimer may try to probe


def claim_policy(
    state: ControlState, *, queue: str, handlers: list[TaskOptions], free: int, slots: int
) -> Policy:
    """Which task types, how many, and which rows (fresh or retries) may be claimed now."""
    stopped = Policy(handlers=[], limit=0)
    if queue in state.paused_queues or state.level >= Level.EMERGENCY:
        return stopped
    allowed = [
        h
        for h in handlers
        if h.task_type not in state.paused_types and h.task_type not in state.breakers
    ]
    probes = tuple(
        h.task_type
        for h in handlers
        if state.breakers.get(h.task_type) == "HALF_OPEN" and h.task_type not in state.paused_types
    )
    limit = free
    if state.level >= Level.DEGRADED:
        allowed = [h for h in allowed if h.essential]
        in_use = slots - free
        limit = max(0, max(1, slots // 2) - in_use)
    if state.level >= Level.WARNING:
        limit = min(limit, max(1, free // 2)) if limit else 0
    return Policy(
        handlers=allowed,
        limit=limit,
        retries_only=state.level >= Level.CIRCUIT_OPEN,
        probes=probes if limit else (),
    )


class ProtectionEvaluator:
    """Leader-only: moves breakers OPEN -> HALF_OPEN after the cool-down, trips breakers by
    failure rate, and sets the global level from the number of failing types."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        settings: ProtectionSettings,
        *,
        worker_id: str,
        on_change: Callable[[Level, Level], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` measures the calm before the level steps down (seconds, monotonic); tests
        pass their own to step through the hysteresis without sleeping. Breaker times (the
        cool-down, the failure-rate window) are the database clock's."""
        self._clock = clock
        self._pool = pool
        self._settings = settings
        self._worker_id = worker_id
        self._on_change = on_change
        self._calm_since: float | None = None
        self.level = Level.NORMAL
        self.evaluated = asyncio.Event()  # set after every pass (tests wait on it)

    async def run_once(self) -> Level:
        s = self._settings
        async with self._pool.connection() as conn:
            for task_type in await store.breaker_half_open(conn, s.breaker_cooldown_seconds):
                log.info("breaker_half_open", task_type=task_type)
            # breaker_threshold 0 turns breakers off: no trip by rate either.
            tripped = (
                await store.breaker_trip_by_rate(
                    conn,
                    window_seconds=s.breaker_window_seconds,
                    rate=s.breaker_failure_rate,
                    min_volume=s.breaker_min_volume,
                )
                if s.breaker_threshold > 0
                else []
            )
            for task_type in tripped:
                log.warning("breaker_opened", task_type=task_type, reason="failure rate")
            failing = await store.failing_types(conn)
            state = await store.control_state(conn)
            current = Level(int(state["level"] or 0))
            target = level_for(len(failing), s.level_thresholds)
            new = self._with_hysteresis(current, target)
            if new != current:
                names = ", ".join(f"{f['task_type']} ({f['state']})" for f in failing) or "none"
                reason = f"{len(failing)} failing task type(s): {names}"
                if await store.aprotection_set(
                    conn, level=int(new), reason=reason, actor=self._worker_id, force=False
                ):
                    event = log.warning if new > current else log.info
                    event(
                        "protection_level_changed",
                        level_from=int(current),
                        level_to=int(new),
                        reason=reason,
                    )
                    if self._on_change is not None:
                        self._on_change(current, new)
                    current = new
        self.level = current
        self.evaluated.set()
        return current

    def _with_hysteresis(self, current: Level, target: Level) -> Level:
        if target >= current:
            self._calm_since = None
            return target
        if current >= Level.EMERGENCY:
            return current  # only an operator lowers L4
        now = self._clock()
        if self._calm_since is None:
            self._calm_since = now
            return current
        if now - self._calm_since >= self._settings.calm_seconds:
            self._calm_since = now
            return Level(current - 1)
        return current
