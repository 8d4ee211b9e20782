"""The service base: outages logged once, the leader gate, wake-ups coalesced and paced. No
database."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

import psycopg
import pytest

import taskq.service
from taskq.backoff import Cooldown
from taskq.schedules import Schedule, plan
from taskq.service import PeriodicService


class Recorder:
    """Stands in for the module's logger (the suite may have cached structlog loggers, which
    ``capture_logs`` cannot see)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def record(event: str, **fields: Any) -> None:
            self.events.append((level, event, fields))

        return record


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(taskq.service, "log", recorder)
    return recorder


class Gate:
    def __init__(self) -> None:
        self.is_leader = False
        self.elected = asyncio.Event()

    def set(self, leader: bool) -> None:
        self.is_leader = leader
        if leader:
            self.elected.set()
        else:
            self.elected.clear()


class Flaky(PeriodicService):
    """Fails with a connection error ``down`` times, then succeeds."""

    name = "flaky"

    def __init__(self, down: int, **kwargs: Any) -> None:
        super().__init__(interval_seconds=0.001, backoff_cap_seconds=0.001, **kwargs)
        self.down = down
        self.calls = 0
        self.followed = 0
        self.done = asyncio.Event()

    async def run_once(self) -> None:
        self.calls += 1
        if self.calls <= self.down:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        if self.calls >= self.down + 3:
            self.done.set()

    async def on_follower(self) -> None:
        self.followed += 1


async def run_until(service: Flaky, event: asyncio.Event) -> None:
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(event.wait(), 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_outage_is_logged_once_and_its_end_once(logs: Recorder) -> None:
    service = Flaky(down=25)
    await run_until(service, service.done)
    events = [(event, fields.get("service")) for _, event, fields in logs.events]
    assert events.count(("service_unavailable", "flaky")) == 1
    assert events.count(("service_resumed", "flaky")) == 1
    assert service.failures == 25 and service.runs >= 3


async def test_a_bug_is_logged_and_the_loop_goes_on(logs: Recorder) -> None:
    class Buggy(Flaky):
        async def run_once(self) -> None:
            self.calls += 1
            if self.calls == 1:
                raise KeyError("bug")
            self.done.set()

    service = Buggy(down=0)
    service.interval_seconds = 0.0  # the pause after a bug is max(interval, 1 s)
    await run_until(service, service.done)
    assert [(level, event) for level, event, _ in logs.events] == [("exception", "service_failed")]


async def test_the_leader_gate_runs_only_on_the_leader() -> None:
    gate = Gate()
    service = Flaky(down=0, leader=gate)
    task = asyncio.create_task(service.run())
    await asyncio.sleep(0.05)
    assert service.calls == 0 and service.followed == 1  # waiting for the lease
    gate.set(True)
    await asyncio.wait_for(service.done.wait(), 5)
    gate.set(False)
    await asyncio.sleep(0.05)
    calls = service.calls
    await asyncio.sleep(0.05)
    assert service.calls == calls and service.followed == 2  # stepped down: stopped running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wake_ups_are_coalesced() -> None:
    """A flood of wake() calls costs at most one run per coalesce period."""

    class Counted(PeriodicService):
        def __init__(self) -> None:
            super().__init__("counted", interval_seconds=60, coalesce_seconds=0.02)
            self.calls = 0

        async def run_once(self) -> None:
            self.calls += 1

    service = Counted()
    task = asyncio.create_task(service.run())
    start = time.monotonic()
    while time.monotonic() - start < 0.5:
        service.wake()
        await asyncio.sleep(0)
    elapsed = time.monotonic() - start
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 2 <= service.calls <= elapsed / 0.02 + 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_cooldown_lets_rare_runs_through_at_once() -> None:
    """Runs further apart than the period never wait, even right after the previous one's
    start (what a task arriving just after a claim round needs)."""
    clock = Clock()
    cooldown = Cooldown(0.005, burst=4, clock=clock)
    for _ in range(20):
        assert cooldown.wait_seconds() == 0.0
        cooldown.take()
        clock.now += 0.001  # the next wake-up 1 ms after this run: at once, from the burst
        assert cooldown.wait_seconds() == 0.0
        clock.now += 0.019  # 20 ms apart on average, the bucket refills


def test_a_cooldown_bounds_a_flood_to_one_run_per_period_after_the_burst() -> None:
    clock = Clock()
    cooldown = Cooldown(0.005, burst=4, clock=clock)
    waits = []
    for _ in range(4):
        waits.append(cooldown.wait_seconds())
        cooldown.take()
    assert waits == [0.0] * 4  # the burst
    runs, start = 0, clock.now
    while clock.now - start < 1.0:  # a second of wake-ups, each run as soon as allowed
        clock.now += cooldown.wait_seconds()
        cooldown.take()
        runs += 1
        clock.now += 0.0001
    assert 190 <= runs <= 200


def test_a_cooldown_of_zero_never_waits() -> None:
    cooldown = Cooldown(0.0, burst=4, clock=Clock())
    for _ in range(10):
        cooldown.take()
        assert cooldown.wait_seconds() == 0.0


# --- catch-up: never a burst on restart ------------------------------------------------------

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "catch_up,limit,runs",
    [("skip", 10, 1), ("run_once", 10, 1), ("backfill", 3, 3)],
)
def test_a_restart_within_the_grace_fires_no_burst(catch_up: Any, limit: int, runs: int) -> None:
    """Workers were down 55 s; an every-5s schedule has 11 ticks due, each still within the 60 s
    misfire grace. skip fired all 11 at once; now skip and run_once fire the newest only and
    backfill at most its limit, and the rest are recorded as missed."""
    schedule = Schedule("s", "t", "every 5s", catch_up=catch_up, backfill_limit=limit)
    decided = plan(schedule, after=T0, now=T0 + dt.timedelta(seconds=57))
    assert len(decided.run) == runs
    assert decided.run[-1] == T0 + dt.timedelta(seconds=55)  # always the newest
    assert len(decided.missed) == 11 - runs
    assert sorted(decided.run + decided.missed) == [
        T0 + dt.timedelta(seconds=5 * n) for n in range(1, 12)
    ]


def test_an_overflowing_catch_up_keeps_the_newest_ticks() -> None:
    schedule = Schedule("s", "t", "every 1s", catch_up="run_once")
    decided = plan(schedule, after=T0, now=T0 + dt.timedelta(days=2))
    assert decided.run == [T0 + dt.timedelta(days=2)]
    assert len(decided.missed) + decided.missed_uncounted == 2 * 86400 - 1


# --- the memory guard ------------------------------------------------------------------------


async def test_memory_guard_gives_up_only_when_idle_over_the_limit_for_the_grace() -> None:
    from taskq.worker.memory import MemoryGuard

    rss = [100]
    busy = [True]
    gave_up: list[bool] = []
    guard = MemoryGuard(
        50,
        grace_seconds=0.05,
        busy=lambda: busy[0],
        on_give_up=lambda: gave_up.append(True),
        read=lambda: rss[0],
    )
    assert guard() and guard.reason is None  # not read yet: claiming allowed
    assert await guard.run_once() is True
    assert not guard() and "memory limit" in (guard.reason or "")
    await asyncio.sleep(0.1)
    assert await guard.run_once() and gave_up == []  # busy: finishing tasks may free memory
    busy[0] = False
    await guard.run_once()  # idle and over: the grace starts now
    rss[0] = 10
    await asyncio.sleep(0.1)
    assert await guard.run_once() is False and guard() and gave_up == []  # it came back
    rss[0] = 100
    await guard.run_once()
    await asyncio.sleep(0.1)
    await guard.run_once()
    await guard.run_once()
    assert gave_up == [True] and guard.gave_up  # once
