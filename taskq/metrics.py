"""Prometheus metrics of one worker process, on its own registry (so several workers in one
process, as in tests, never collide), served on ``--metrics-port``.

Counters and histograms are updated in-process as tasks move. Gauges that describe the whole
queue (backlog, oldest runnable age, dead letters, protection level, breakers, database
health) come from one cheap periodic query run by the *leader* only: every worker exporting
them would make ``sum()`` across workers count each task several times. A worker that loses
leadership clears them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from psycopg_pool import AsyncConnectionPool

from taskq import store
from taskq.db import ConnectionError_
from taskq.leader import Elector
from taskq.outcome import Kind, Outcome

log = structlog.get_logger("taskq.metrics")

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)
_RUN_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600)
_ATTEMPT_LABELS = {n: str(n) for n in range(6)}
OUTCOME_LABELS = {
    Kind.SUCCESS: "success",
    Kind.COMMITTED: "success",
    Kind.DUPLICATE: "duplicate_skipped",
    Kind.FAILURE: "failure",
    Kind.RETRY: "retry",
    Kind.DEAD: "dead_lettered",
}


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        qt = ["queue", "task_type"]
        self.finished = Counter(
            "taskq_tasks_finished_total",
            "Attempts finished, by outcome (success, failure, retry, dead_lettered, "
            "duplicate_skipped, rescued, lease_lost).",
            [*qt, "outcome"],
            registry=r,
        )
        self.attempts = Counter(
            "taskq_task_attempts_total",
            "Attempts started, by attempt number (0 = first run; 5 = the fifth retry; '6+').",
            [*qt, "attempt"],
            registry=r,
        )
        self.dispatch = Histogram(
            "taskq_dispatch_latency_seconds",
            "From the moment a task became runnable (committed, due, or its retry due) to its "
            "claim, on the database clock.",
            qt,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.run_time = Histogram(
            "taskq_task_run_seconds",
            "Handler run time per attempt.",
            qt,
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.running = Gauge(
            "taskq_running_tasks", "Attempts running in this worker.", ["queue"], registry=r
        )
        self.capacity = Gauge(
            "taskq_capacity_slots", "Slots configured in this worker.", ["queue"], registry=r
        )
        self.leader = Gauge(
            "taskq_leader", "1 if this worker holds the maintenance lease.", registry=r
        )
        # Leader-only gauges.
        self.backlog = Gauge(
            "taskq_backlog_tasks",
            "Tasks by state: runnable, scheduled, retry_waiting, processing, dead_letter.",
            [*qt, "state"],
            registry=r,
        )
        self.oldest = Gauge(
            "taskq_oldest_runnable_age_seconds",
            "Age of the oldest runnable task (consumer lag).",
            qt,
            registry=r,
        )
        self.level = Gauge(
            "taskq_protection_level",
            "Adaptive protection level (0 NORMAL .. 4 EMERGENCY).",
            registry=r,
        )
        self.breaker_open = Gauge(
            "taskq_breaker_open",
            "1 when the task type's breaker is OPEN, 0.5 HALF_OPEN.",
            ["task_type"],
            registry=r,
        )
        self.dead_tuples = Gauge(
            "taskq_db_dead_tuples", "Dead tuples in taskq.tasks (vacuum debt).", registry=r
        )
        self.last_vacuum = Gauge(
            "taskq_db_last_vacuum_timestamp_seconds",
            "Unix time of the last (auto)vacuum of taskq.tasks.",
            registry=r,
        )
        self.oldest_xact = Gauge(
            "taskq_db_oldest_transaction_seconds",
            "Age of the oldest open transaction (it holds vacuum back).",
            registry=r,
        )
        self.notify_usage = Gauge(
            "taskq_db_notification_queue_usage_ratio",
            "pg_notification_queue_usage(): how full the NOTIFY queue is.",
            registry=r,
        )
        self.level_changes = Counter(
            "taskq_protection_level_changes_total",
            "Protection level changes made by this worker's evaluator.",
            registry=r,
        )
        self._leader_gauges = [self.backlog, self.oldest, self.breaker_open]
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    # --- in-process updates ------------------------------------------------------------------

    # ``labels()`` validates and locks on every call (it was 4% of a draining worker's time):
    # the children are looked up once per label set and kept.

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def claimed(self, queue: str, task_type: str, attempt: int, latency: float | None) -> None:
        self._child(self.attempts, queue, task_type, _ATTEMPT_LABELS.get(attempt, "6+")).inc()
        if latency is not None:
            self._child(self.dispatch, queue, task_type).observe(max(0.0, latency))

    def outcome(self, o: Outcome) -> None:
        t = o.task
        self._child(self.finished, t.queue, t.task_type, OUTCOME_LABELS[o.kind]).inc()
        self._child(self.run_time, t.queue, t.task_type).observe(o.duration_seconds)

    def counted(self, queue: str, task_type: str, outcome: str) -> None:
        self._child(self.finished, queue, task_type, outcome).inc()

    # --- leader-only gauges ------------------------------------------------------------------

    def set_backlog(self, rows: Iterable[dict[str, Any]]) -> None:
        self.backlog.clear()
        self.oldest.clear()
        for row in rows:
            q, t = row["queue"], row["task_type"]
            for state in ("runnable", "scheduled", "retry_waiting", "processing", "dead_letter"):
                self.backlog.labels(q, t, state).set(row[state])
            self.oldest.labels(q, t).set(row["oldest_runnable_seconds"] or 0.0)

    def set_health(self, row: dict[str, Any] | None) -> None:
        if row is None:
            return
        self.dead_tuples.set(row["dead_tuples"] or 0)
        self.last_vacuum.set(row["last_vacuum_epoch"] or 0)
        self.oldest_xact.set(row["oldest_transaction_seconds"] or 0)
        self.notify_usage.set(row["notification_queue_usage"] or 0)

    def set_control(self, level: int, breakers: dict[str, str]) -> None:
        self.level.set(level)
        self.breaker_open.clear()
        for task_type, state in breakers.items():
            self.breaker_open.labels(task_type).set(1.0 if state == "OPEN" else 0.5)

    def clear_leader_gauges(self) -> None:
        for gauge in self._leader_gauges:
            gauge.clear()

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics (a daemon thread)."""
        start_http_server(port, addr=host, registry=self.registry)


class GaugeRefresher:
    """On the leader only: one backlog + health query per interval, shared by all workers."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        metrics: Metrics,
        elector: Elector,
        control: Any,
        *,
        interval_seconds: float = 10.0,
    ) -> None:
        self._pool = pool
        self._metrics = metrics
        self._elector = elector
        self._control = control
        self._interval = interval_seconds

    async def run_once(self) -> bool:
        self._metrics.leader.set(1 if self._elector.is_leader else 0)
        if not self._elector.is_leader:
            self._metrics.clear_leader_gauges()
            return False
        async with self._pool.connection() as conn:
            self._metrics.set_backlog(await store.abacklog(conn))
            self._metrics.set_health(await store.adb_health(conn))
        state = self._control.state
        self._metrics.set_control(int(state.level), state.breakers)
        return True

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except ConnectionError_:
                pass  # the claimers already report the outage
            except Exception:  # loop boundary
                log.exception("metrics_refresh_failed")
            await asyncio.sleep(self._interval)
