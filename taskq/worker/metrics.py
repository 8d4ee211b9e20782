"""Prometheus metrics of one worker process, on its own registry (so several workers in one
process, as in tests, never collide), served on ``--metrics-port``.

Counters and histograms are updated in-process as tasks move. Gauges that describe the whole
queue (backlog, oldest runnable age, dead letters, protection level, breakers, database
health) come from one cheap periodic query run by the *leader* only: every worker exporting
them would make ``sum()`` across workers count each task several times. A worker that loses
leadership clears them.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from psycopg_pool import AsyncConnectionPool

from taskq.db import store
from taskq.errors import ConfigError
from taskq.model import ClaimedTask, held_by_limits
from taskq.outcome import Kind, Outcome
from taskq.service import Leadership, PeriodicService

log = structlog.get_logger("taskq.worker.metrics")

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
    Kind.RELEASED: "released",
    Kind.LOST: "lease_lost",
    Kind.CANCELLED: "cancelled",
}


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        qt = ["queue", "task_type"]
        self.finished = Counter(
            "taskq_tasks_finished_total",
            "Attempts finished, by outcome (success, failure, retry, dead_lettered, "
            "duplicate_skipped, cancelled, rescued, released, lease_lost).",
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
            "Tasks by state: runnable, scheduled, retry_waiting, retry_due (part of runnable),"
            " processing, dead_letter.",
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
        self.switch_enabled = Gauge(
            "taskq_switch_enabled",
            "Business switches that were ever set: 1 on, 0 off (one never set is on).",
            ["switch"],
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
        # The scheduler runs on the leader; a tick is counted once, by the worker that fired it.
        self.schedule_ticks = Counter(
            "taskq_schedule_ticks_total",
            "Periodic ticks by outcome: fired (enqueued within the misfire grace), late "
            "(enqueued past it, by catch_up run_once/backfill), missed (recorded, not run).",
            ["schedule", "outcome"],
            registry=r,
        )
        self.schedule_delay = Histogram(
            "taskq_schedule_delay_seconds",
            "From a tick's time to its task's enqueue, on the database clock.",
            ["schedule"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.oldest_retry = Gauge(
            "taskq_oldest_retry_age_seconds",
            "How long the oldest due retry has waited (the retry lane's lag).",
            qt,
            registry=r,
        )
        # Flow control, per limited task type (`taskq limits`).
        self.flow_running = Gauge(
            "taskq_flow_running_tasks",
            "Attempts of a limited task type running now, cluster-wide.",
            ["task_type"],
            registry=r,
        )
        self.flow_cap = Gauge(
            "taskq_flow_max_running_tasks",
            "The type's cluster-wide running cap (max_running).",
            ["task_type"],
            registry=r,
        )
        self.flow_held = Gauge(
            "taskq_flow_held_tasks",
            "Due tasks a flow limit holds back right now (they stay PENDING).",
            ["task_type"],
            registry=r,
        )
        self.flow_tokens = Gauge(
            "taskq_flow_rate_tokens",
            "Tokens in a rate-limited type's bucket (a claim needs one per task).",
            ["task_type"],
            registry=r,
        )
        self._leader_gauges = [
            self.backlog,
            self.oldest,
            self.oldest_retry,
            self.breaker_open,
            self.flow_running,
            self.flow_cap,
            self.flow_held,
            self.flow_tokens,
            self.switch_enabled,
        ]
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

    def claimed_many(self, tasks: Sequence[ClaimedTask]) -> None:
        """``claimed`` for every task of one claim: one increment per label set and one
        histogram update per bucket touched, not one locked update per task and metric."""
        counts: dict[tuple[str, str, str], int] = {}
        latencies: dict[tuple[str, str], list[float]] = {}
        for t in tasks:
            key = (t.queue, t.task_type, _ATTEMPT_LABELS.get(t.retry_count, "6+"))
            counts[key] = counts.get(key, 0) + 1
            if t.ready_at is not None:
                latency = (t.started_at - t.ready_at).total_seconds()
                latencies.setdefault(key[:2], []).append(max(0.0, latency))
        for key, n in counts.items():
            self._child(self.attempts, *key).inc(n)
        for pair, values in latencies.items():
            observe_many(self._child(self.dispatch, *pair), values)

    def outcomes(self, batch: Iterable[Outcome], label: str | None = None) -> None:
        """``outcome`` for every outcome of one written batch, counted per label set."""
        counts: dict[tuple[str, str, str], int] = {}
        durations: dict[tuple[str, str], list[float]] = {}
        for o in batch:
            t = o.task
            key = (t.queue, t.task_type, label or OUTCOME_LABELS[o.kind])
            counts[key] = counts.get(key, 0) + 1
            durations.setdefault(key[:2], []).append(o.duration_seconds)
        for key, n in counts.items():
            self._child(self.finished, *key).inc(n)
        for pair, values in durations.items():
            observe_many(self._child(self.run_time, *pair), values)

    def running_child(self, queue: str) -> Any:
        """The ``running`` gauge of ``queue`` (looked up once, set at every change)."""
        return self._child(self.running, queue)

    def outcome(self, o: Outcome, label: str | None = None) -> None:
        """Count a written outcome; ``label`` overrides the kind's (a failure that exhausted
        the retries is ``dead_lettered``)."""
        t = o.task
        self._child(self.finished, t.queue, t.task_type, label or OUTCOME_LABELS[o.kind]).inc()
        self._child(self.run_time, t.queue, t.task_type).observe(o.duration_seconds)

    def counted(self, queue: str, task_type: str, outcome: str) -> None:
        self._child(self.finished, queue, task_type, outcome).inc()

    def schedule_pass(self, schedule: str, delays: list[float], late: int, missed: int) -> None:
        if len(delays) > late:
            self._child(self.schedule_ticks, schedule, "fired").inc(len(delays) - late)
        if late:
            self._child(self.schedule_ticks, schedule, "late").inc(late)
        if missed:
            self._child(self.schedule_ticks, schedule, "missed").inc(missed)
        for delay in delays:
            self._child(self.schedule_delay, schedule).observe(delay)

    # --- leader-only gauges ------------------------------------------------------------------

    def set_backlog(self, rows: Iterable[dict[str, Any]]) -> None:
        self.backlog.clear()
        self.oldest.clear()
        for row in rows:
            q, t = row["queue"], row["task_type"]
            for state in (
                "runnable",
                "scheduled",
                "retry_waiting",
                "retry_due",
                "processing",
                "dead_letter",
            ):
                self.backlog.labels(q, t, state).set(row[state])
            self.oldest.labels(q, t).set(row["oldest_runnable_seconds"] or 0.0)
            self.oldest_retry.labels(q, t).set(row["oldest_retry_seconds"] or 0.0)

    def set_flow(self, rows: Iterable[dict[str, Any]]) -> None:
        for gauge in (self.flow_running, self.flow_cap, self.flow_held, self.flow_tokens):
            gauge.clear()
        for row in rows:
            t = row["task_type"]
            self.flow_running.labels(t).set(row["running"])
            self.flow_held.labels(t).set(held_by_limits(row))
            if row["max_running"] is not None:
                self.flow_cap.labels(t).set(row["max_running"])
            if row["tokens"] is not None:
                self.flow_tokens.labels(t).set(row["tokens"])

    def set_health(self, row: dict[str, Any] | None) -> None:
        if row is None:
            return
        self.dead_tuples.set(row["dead_tuples"] or 0)
        self.last_vacuum.set(row["last_vacuum_epoch"] or 0)
        self.oldest_xact.set(row["oldest_transaction_seconds"] or 0)
        self.notify_usage.set(row["notification_queue_usage"] or 0)

    def set_control(
        self, level: int, breakers: dict[str, str], switches: dict[str, bool] | None = None
    ) -> None:
        self.level.set(level)
        self.breaker_open.clear()
        for task_type, state in breakers.items():
            self.breaker_open.labels(task_type).set(1.0 if state == "OPEN" else 0.5)
        self.switch_enabled.clear()
        for name, enabled in (switches or {}).items():
            self.switch_enabled.labels(name).set(1.0 if enabled else 0.0)

    def clear_leader_gauges(self) -> None:
        for gauge in self._leader_gauges:
            gauge.clear()

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics (a daemon thread). A port in use is bad configuration."""
        try:
            start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def observe_many(child: Any, values: Sequence[float]) -> None:
    """``child.observe(v)`` for each value, with one increment per bucket touched and one of
    the sum (each ``observe`` takes two locks). Uses the histogram child's bucket list; falls
    back to ``observe`` if prometheus_client ever lays it out differently."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if len(values) < 2 or bounds is None or buckets is None or total is None:
        for value in values:
            child.observe(value)
        return
    hits: dict[int, int] = {}
    for value in values:
        i = bisect_left(bounds, value)  # the first bucket whose upper bound is >= value
        if i < len(bounds) and value <= bounds[i]:  # (NaN fits none, as with observe)
            hits[i] = hits.get(i, 0) + 1
    total.inc(sum(values))
    for i, n in hits.items():
        buckets[i].inc(n)


class GaugeRefresher(PeriodicService):
    """On the leader only: the backlog and health queries, shared by all workers.

    The health gauges (the oldest transaction, the NOTIFY queue, dead tuples) and the flow
    limits are cheap reads, refreshed every interval: they are what an operator alerts on. The
    backlog query counts every live row (46-60 ms with 100,000 queued, 0.50-0.58 s with a
    million), so with a backlog in the millions counting every 10 s would keep the server
    counting a twentieth of the time while the workers drain. The count waits instead until
    it has taken at most ``MAX_SHARE`` of the time since the last one started."""

    name = "gauges"
    MAX_SHARE = 0.02

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        metrics: Metrics,
        elector: Leadership,
        control: Any,
        *,
        interval_seconds: float = 10.0,
    ) -> None:
        super().__init__(interval_seconds=interval_seconds, jitter=0.1, leader=elector)
        self._pool = pool
        self._metrics = metrics
        self._control = control
        self._count_due = 0.0  # time.monotonic() from which the backlog is counted again

    async def on_follower(self) -> None:
        """A worker that is not (or no longer) the leader exports none of the queue gauges."""
        self._metrics.leader.set(0)
        self._metrics.clear_leader_gauges()
        self._count_due = 0.0  # a leader again counts at once: its gauges were cleared

    async def run_once(self) -> bool:
        """Refresh the gauges; return whether the backlog was counted this time."""
        self._metrics.leader.set(1)
        counted = False
        async with self._pool.connection() as conn:
            if time.monotonic() >= self._count_due:
                started = time.monotonic()
                backlog = await store.abacklog(conn)
                self._count_due = started + (time.monotonic() - started) / self.MAX_SHARE
                counted = True
                self._metrics.set_backlog(backlog)
                # The dashboard's backlog chart: one sample row per queue and minute (upserted).
                await store.sample_backlog(conn, backlog)
            self._metrics.set_health(await store.adb_health(conn))
            self._metrics.set_flow(await store.alimits_list(conn))
        state = self._control.state
        self._metrics.set_control(int(state.level), state.breakers, state.switches)
        return counted
