"""Circuit breakers and the adaptive protection level.

Per task type, a breaker opens after ``breaker_threshold`` consecutive failures (counted in
the failure's own statement, see sql/queries/finish.sql) or when the failure rate over a window
is too high; an open breaker's tasks wait (they are not claimed, not failed). After a
cool-down it goes HALF_OPEN: exactly one worker wins the probe and runs one task; success
closes the breaker, failure re-opens it.

Globally, the number of task types whose breaker is not closed sets the level, shared by all
workers through the database:

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

import time
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from taskq import store
from taskq.control import ControlState, Level
from taskq.model import TaskOptions

log = structlog.get_logger("taskq.protection")


@dataclass(frozen=True, slots=True)
class ProtectionSettings:
    breaker_threshold: int = 5
    breaker_cooldown_seconds: float = 30.0
    breaker_window_seconds: float = 300.0
    breaker_failure_rate: float = 0.5
    breaker_min_volume: int = 20
    probe_timeout_seconds: float = 300.0
    level_thresholds: tuple[int, int, int, int] = (2, 3, 4, 6)
    """How many task types with a non-closed breaker raise the level to L1, L2, L3, L4."""
    calm_seconds: float = 60.0
    evaluate_interval_seconds: float = 1.0


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
        self, pool: AsyncConnectionPool[Any], settings: ProtectionSettings, *, worker_id: str
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._worker_id = worker_id
        self._calm_since: float | None = None
        self.level = Level.NORMAL

    async def run_once(self) -> Level:
        s = self._settings
        async with self._pool.connection() as conn:
            for task_type in await store.breaker_half_open(conn, s.breaker_cooldown_seconds):
                log.info("breaker_half_open", task_type=task_type)
            for task_type in await store.breaker_trip_by_rate(
                conn,
                window_seconds=s.breaker_window_seconds,
                rate=s.breaker_failure_rate,
                min_volume=s.breaker_min_volume,
            ):
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
                    current = new
        self.level = current
        return current

    def _with_hysteresis(self, current: Level, target: Level) -> Level:
        if target >= current:
            self._calm_since = None
            return target
        if current >= Level.EMERGENCY:
            return current  # only an operator lowers L4
        now = time.monotonic()
        if self._calm_since is None:
            self._calm_since = now
            return current
        if now - self._calm_since >= self._settings.calm_seconds:
            self._calm_since = now
            return Level(current - 1)
        return current
