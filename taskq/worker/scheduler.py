"""The Scheduler: turns schedules into tasks, exactly once per tick.

A maintenance service: it runs on the leader only (the ``maintenance`` lease). If the leader
dies, another worker takes the lease within its TTL (15 s), well inside the 60 s misfire
grace, so no tick is lost to a hand-over. Leadership is not what makes a tick exactly-once:
each schedule is one transaction, and a tick's row in ``schedule_ticks`` (primary key
(name, tick)) is written before its task, in the same transaction, so two passes that overlap
(a hand-over, ``run_schedule`` from a test) still enqueue each tick at most once, and a tick no
worker was around for is recorded as missed, not lost.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog

from taskq.app import App
from taskq.db import store
from taskq.db.connection import connect
from taskq.schedules import Schedule, plan
from taskq.service import Leadership, PeriodicService
from taskq.worker.metrics import Metrics

log = structlog.get_logger("taskq.worker.scheduler")


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    enqueued: list[tuple[dt.datetime, int]]
    missed: int
    next_tick: dt.datetime
    delays: list[float]
    """Seconds from each enqueued tick's time to its enqueue (database clock)."""
    late: int
    """Enqueued ticks that were past the misfire grace (catch_up run_once / backfill)."""


def run_schedule(conn: psycopg.Connection[Any], app: App, schedule: Schedule) -> Fired:
    """One schedule, one transaction: enqueue its due ticks, record its missed ones."""
    with conn.transaction():
        state = store.schedule_upsert(
            conn,
            {
                "name": schedule.name,
                "task_type": schedule.task_type,
                "spec": schedule.spec,
                "timezone": schedule.timezone,
                "catch_up": schedule.catch_up,
                "backfill_limit": schedule.backfill_limit,
            },
        )
        after = max(state["last_tick"] or state["since"], state["since"])
        decided = plan(schedule, after=after, now=state["now"])
        enqueued: list[tuple[dt.datetime, int]] = []
        for tick in decided.missed:
            store.schedule_tick(
                conn,
                name=schedule.name,
                tick=tick,
                outcome="missed",
                task_id=None,
                reason=f"no worker ran the schedule at its time; catch_up={schedule.catch_up}",
            )
        for tick in decided.run:
            if not store.schedule_tick(
                conn, name=schedule.name, tick=tick, outcome="enqueued", task_id=None, reason=None
            ):
                continue  # recorded already by another pass
            key = f"{schedule.name}@{tick.isoformat()}"
            task_id = app.enqueue(
                conn,
                schedule.task_type,
                schedule.payload,
                biz_id=key,
                unique_key=key,
                scheduled_at=tick,
            )
            store.schedule_tick_task(conn, name=schedule.name, tick=tick, task_id=task_id)
            enqueued.append((tick, task_id))
        missed = len(decided.missed) + decided.missed_uncounted
        latest = max([*decided.run, *decided.missed], default=None)
        store.schedule_advance(
            conn,
            {
                "name": schedule.name,
                "last_tick": latest,
                "last_task_id": enqueued[-1][1] if enqueued else None,
                "next_tick": decided.next_tick,
                "missed": missed,
            },
        )
    for tick, task_id in enqueued:
        log.info("schedule_fired", schedule=schedule.name, tick=tick.isoformat(), task_id=task_id)
    if missed:
        log.warning("schedule_missed", schedule=schedule.name, missed=missed)
    delays = [max(0.0, (state["now"] - tick).total_seconds()) for tick, _ in enqueued]
    late = sum(1 for d in delays if d > schedule.misfire_grace_seconds)
    return Fired(schedule.name, enqueued, missed, decided.next_tick, delays, late)


class Scheduler(PeriodicService):
    """Runs every schedule of the app, sleeping until the next tick is due."""

    name = "scheduler"

    def __init__(
        self,
        app: App,
        dsn: str,
        *,
        max_sleep_seconds: float = 30.0,
        connect_kwargs: Mapping[str, Any] | None = None,
        leader: Leadership | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(interval_seconds=max_sleep_seconds, leader=leader)
        self._app = app
        self._dsn = dsn
        self._connect_kwargs = dict(connect_kwargs or {})
        self._max_sleep = max_sleep_seconds
        self._metrics = metrics
        self._conn: psycopg.Connection[Any] | None = None

    async def run_once(self) -> list[Fired]:
        """One pass over every schedule (blocking statements, so in a thread)."""
        fired = await asyncio.to_thread(self._pass)
        if self._metrics is not None:
            for f in fired:
                self._metrics.schedule_pass(f.schedule, f.delays, f.late, f.missed)
        return fired

    def _pass(self) -> list[Fired]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(
                self._dsn, role="scheduler", autocommit=True, **self._connect_kwargs
            )
        fired = []
        for schedule in self._app.schedules.values():
            fired.append(run_schedule(self._conn, self._app, schedule))
        return fired

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def on_error(self) -> None:
        await asyncio.to_thread(self.close)  # the next pass opens a fresh connection

    async def run(self) -> None:
        if not self._app.schedules:
            return
        try:
            await super().run()
        finally:
            self.close()

    def delay_after(self, result: list[Fired]) -> float:
        """Until the earliest next tick (the Python clock measures only this duration)."""
        now = dt.datetime.now(dt.UTC)
        soonest = min((f.next_tick for f in result), default=now)
        wait = (soonest - now).total_seconds() + 0.05
        return max(0.05, min(self._max_sleep, wait))
