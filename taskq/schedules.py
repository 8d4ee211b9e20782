"""Schedules as data: a cron expression (parsed by ``cronsim``, DST-aware in the schedule's
time zone) or a fixed interval (``every 10m``, ticks aligned to the Unix epoch). Pure
computation, no I/O: which ticks fall in a window, and what to do with the late ones."""

from __future__ import annotations

import datetime as dt
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from taskq.errors import ConfigError
from taskq.model import JSON

CatchUp = Literal["skip", "run_once", "backfill"]

_EVERY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TICKS_PER_PASS = 100_000
"""A bound on how many missed ticks one catch-up pass walks (a minute schedule down for two
months); older ones are counted as a lump."""


def parse_every(text: str) -> float:
    """``"90s"``, ``"10m"``, ``"6h"``, ``"1d"`` (a bare number is seconds) -> seconds."""
    match = _EVERY.match(text)
    if not match:
        raise ConfigError(f"bad interval {text!r}: use e.g. 30s, 10m, 6h, 1d")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds < 1:
        raise ConfigError(f"interval {text!r} is shorter than a second")
    return seconds


@dataclass(frozen=True, slots=True)
class Spec:
    cron: str | None
    every_seconds: float | None
    zone: ZoneInfo

    def ticks_after(self, after: dt.datetime) -> Iterator[dt.datetime]:
        """Every tick strictly after ``after``, in order (UTC datetimes)."""
        if self.every_seconds is not None:
            step = self.every_seconds
            n = int(after.timestamp() // step) + 1
            while True:
                yield dt.datetime.fromtimestamp(n * step, dt.UTC)
                n += 1
        assert self.cron is not None
        local = after.astimezone(self.zone)
        for tick in CronSim(self.cron, local):
            yield tick.astimezone(dt.UTC)


def parse_spec(spec: str, timezone: str = "UTC") -> Spec:
    """A cron expression, or ``every <interval>``."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {timezone!r}") from None
    text = spec.strip()
    if text.startswith("every "):
        return Spec(None, parse_every(text[len("every ") :]), zone)
    try:
        CronSim(text, dt.datetime.now(zone))
    except CronSimError as exc:
        raise ConfigError(f"bad cron expression {spec!r}: {exc}") from None
    return Spec(text, None, zone)


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    task_type: str
    spec: str
    timezone: str = "UTC"
    payload: JSON = field(default_factory=dict)
    catch_up: CatchUp = "skip"
    backfill_limit: int = 10
    misfire_grace_seconds: float = 60.0
    """A tick found later than this after its time counts as missed (workers were down)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What one pass does with the ticks due since the last one."""

    run: list[dt.datetime]
    missed: list[dt.datetime]
    missed_uncounted: int  # beyond MAX_TICKS_PER_PASS: counted, not listed
    next_tick: dt.datetime


def plan(schedule: Schedule, *, after: dt.datetime, now: dt.datetime) -> Plan:
    """Split the ticks in (after, now] into those to enqueue and those missed, by the
    schedule's catch-up policy. A tick within the misfire grace is simply on time."""
    spec = parse_spec(schedule.spec, schedule.timezone)
    window: deque[dt.datetime] = deque(maxlen=MAX_TICKS_PER_PASS)  # the newest ones
    seen = 0
    ticks = spec.ticks_after(after)
    next_tick = next(ticks)
    while next_tick <= now:
        window.append(next_tick)
        seen += 1
        next_tick = next(ticks)
    due = list(window)
    overflow = seen - len(due)
    grace = dt.timedelta(seconds=schedule.misfire_grace_seconds)
    # However many ticks fell due since the last pass (a restart, a leader hand-over, a slow
    # pass), skip and run_once fire at most one of them, and backfill at most backfill_limit:
    # a restart never fires a burst of ticks that were each still "within the grace".
    if schedule.catch_up == "skip":
        # Only the newest tick, and only if it is still on time.
        run = due[-1:] if due and now - due[-1] <= grace else []
    elif schedule.catch_up == "run_once":
        # One run stands for every tick due: the newest, on time or late.
        run = due[-1:]
    else:
        keep = schedule.backfill_limit
        run = due[-keep:] if keep > 0 else [t for t in due[-1:] if now - t <= grace]
    missed = due[: len(due) - len(run)]
    return Plan(run=run, missed=missed, missed_uncounted=overflow, next_tick=next_tick)
