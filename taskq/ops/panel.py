"""The observation panel's data: series over time for the four charts, a page of the task
browser, and the workers. Used by the dashboard; plain data, no HTML."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError
from taskq.model import Status

RANGES: dict[str, int] = {"15m": 15, "1h": 60, "6h": 360, "24h": 1440}
"""The chart ranges, in minutes. Minute resolution throughout."""

OUTCOMES = ("success", "failed", "dead_lettered", "permanent", "cancelled")


@dataclass(slots=True)
class Series:
    name: str
    points: list[tuple[float, float]] = field(default_factory=list)  # (epoch seconds, value)


@dataclass(slots=True)
class Chart:
    key: str  # outcomes, backlog, latency, retries
    title: str
    unit: str
    series: list[Series]
    bars: list[tuple[str, float]] | None = None  # a histogram instead of series

    @property
    def empty(self) -> bool:
        if self.bars is not None:
            return not any(v for _, v in self.bars)
        return not any(s.points for s in self.series)


def minutes_of(range_key: str) -> int:
    try:
        return RANGES[range_key]
    except KeyError:
        raise ConfigError(f"range must be one of {', '.join(RANGES)}") from None


def _epoch(bucket: dt.datetime) -> float:
    return bucket.timestamp()


def charts(dsn: str, range_key: str = "1h", *, task_type: str | None = None) -> list[Chart]:
    """The four charts: finished per minute by outcome, backlog, latencies, retries."""
    minutes = minutes_of(range_key)
    with session(dsn, role="dashboard") as conn:
        outcomes = store.chart_outcomes(conn, minutes, task_type)
        backlog = [] if task_type else store.chart_backlog(conn, minutes)
        latency = store.chart_latency(conn, minutes, task_type)
        retries = store.chart_retries(conn, minutes, task_type)
    by_outcome: dict[str, Series] = {}
    for row in outcomes:
        name = str(row["outcome"])
        by_outcome.setdefault(name, Series(name)).points.append(
            (_epoch(row["bucket"]), float(row["n"]))
        )
    outcome_series = [by_outcome[o] for o in OUTCOMES if o in by_outcome]
    outcome_series += [s for k, s in sorted(by_outcome.items()) if k not in OUTCOMES]
    backlog_series = [Series(n) for n in ("runnable", "scheduled", "retry_waiting")]
    for row in backlog:
        for s in backlog_series:
            s.points.append((_epoch(row["bucket"]), float(row[s.name])))
    latency_series = [Series(n) for n in ("dispatch p50", "dispatch p95", "run p50", "run p95")]
    for row in latency:
        t = _epoch(row["bucket"])
        values = [
            (row["dispatch_seconds"] or [None, None])[0],
            (row["dispatch_seconds"] or [None, None])[1],
            (row["run_seconds"] or [None, None])[0],
            (row["run_seconds"] or [None, None])[1],
        ]
        for s, v in zip(latency_series, values, strict=True):
            if v is not None:
                s.points.append((t, float(v)))
    histogram = {int(r["retries"]): float(r["tasks"]) for r in retries}
    bars = [(str(k) if k < 6 else "6+", histogram.get(k, 0.0)) for k in range(7)]
    scope = f" — {task_type}" if task_type else ""
    result = [
        Chart("outcomes", f"finished per minute{scope}", "tasks/min", outcome_series),
        Chart("latency", f"latency{scope}", "seconds", latency_series),
        Chart("retries", f"retries needed{scope}", "tasks", [], bars=bars),
    ]
    if not task_type:
        result.insert(1, Chart("backlog", "backlog", "tasks", backlog_series))
    return result


# --- the task browser --------------------------------------------------------------------------

PAGE = 50
STATUSES = tuple(s.value for s in Status)


@dataclass(slots=True)
class Filters:
    status: str | None = None
    task_type: str | None = None
    queue: str | None = None
    biz_id: str | None = None
    trace_id: str | None = None
    min_id: int | None = None
    before_id: int | None = None  # the keyset cursor: ids below this one
    max_age_seconds: float | None = None

    def params(self, limit: int) -> dict[str, Any]:
        return {
            "status": self.status,
            "task_type": self.task_type,
            "queue": self.queue,
            "biz_id": self.biz_id,
            "trace_id": self.trace_id,
            "min_id": self.min_id,
            "before_id": self.before_id,
            "max_age_seconds": self.max_age_seconds,
            "limit": limit,
        }


@dataclass(slots=True)
class Page:
    rows: list[dict[str, Any]]
    next_before_id: int | None  # pass as before_id for the next (older) page; None at the end


def browse(dsn: str, filters: Filters, *, limit: int = PAGE) -> Page:
    """One page, newest first, keyset-paged: ``limit + 1`` rows are read to know whether there
    is a next page, never a count over the table."""
    if filters.status is not None and filters.status not in STATUSES:
        raise ConfigError(f"status must be one of {', '.join(STATUSES)}")
    with session(dsn, role="dashboard") as conn:
        rows = store.browse_tasks(conn, filters.params(limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows=rows, next_before_id=int(rows[-1]["id"]) if more and rows else None)


def workers(dsn: str) -> list[dict[str, Any]]:
    """Every registered worker, live first, with its running tasks and memory."""
    with session(dsn, role="dashboard") as conn:
        return store.workers_overview(conn)
