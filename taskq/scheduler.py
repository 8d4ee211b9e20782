"""The Scheduler: turns schedules into tasks, exactly once per tick.

Every worker runs it; there is no leader to die silently. Each pass handles each schedule in
one transaction that first upserts (and so locks) the schedule's row: concurrent workers take
turns, and the second finds the ticks already done. A tick's row in ``schedule_ticks`` (primary
key (name, tick)) is written before its task, in the same transaction, so a tick is enqueued
at most once, and a tick no worker was around for is recorded as missed, not lost.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import structlog

from taskq import store
from taskq.app import App
from taskq.backoff import jittered
from taskq.db import ConnectionError_, connect, first_line
from taskq.schedules import Schedule, plan

log = structlog.get_logger("taskq.scheduler")


@dataclass(frozen=True, slots=True)
class Fired:
    schedule: str
    enqueued: list[tuple[dt.datetime, int]]
    missed: int
    next_tick: dt.datetime


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
    return Fired(schedule.name, enqueued, missed, decided.next_tick)


class Scheduler:
    """Runs every schedule of the app, sleeping until the next tick is due."""

    def __init__(
        self,
        app: App,
        dsn: str,
        *,
        max_sleep_seconds: float = 30.0,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._app = app
        self._dsn = dsn
        self._connect_kwargs = dict(connect_kwargs or {})
        self._max_sleep = max_sleep_seconds
        self._conn: psycopg.Connection[Any] | None = None
        self.passes = 0

    def run_once(self) -> list[Fired]:
        """One pass over every schedule (blocking; the worker runs it in a thread)."""
        if self._conn is None or self._conn.closed:
            self._conn = connect(
                self._dsn, role="scheduler", autocommit=True, **self._connect_kwargs
            )
        fired = []
        for schedule in self._app.schedules.values():
            fired.append(run_schedule(self._conn, self._app, schedule))
        self.passes += 1
        return fired

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def run(self) -> None:
        if not self._app.schedules:
            return
        outage_logged = False
        try:
            while True:
                try:
                    fired = await asyncio.to_thread(self.run_once)
                except ConnectionError_ as exc:
                    if not outage_logged:
                        log.warning("scheduler_unavailable", error=first_line(exc))
                        outage_logged = True
                    self.close()
                    await asyncio.sleep(jittered(2.0))
                    continue
                except Exception:  # loop boundary
                    log.exception("scheduler_failed")
                    self.close()
                    await asyncio.sleep(jittered(5.0))
                    continue
                outage_logged = False
                await asyncio.sleep(self._sleep_for(fired))
        finally:
            self.close()

    def _sleep_for(self, fired: list[Fired]) -> float:
        """Until the earliest next tick (the Python clock measures only this duration)."""
        now = dt.datetime.now(dt.UTC)
        soonest = min((f.next_tick for f in fired), default=now)
        wait = (soonest - now).total_seconds() + 0.05
        return max(0.05, min(self._max_sleep, wait))
