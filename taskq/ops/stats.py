"""Numbers for operators: the backlog, the last minutes' throughput, rates and latencies,
and capacity plans from measured run times (Little's law)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import TaskqError
from taskq.model import Status, held_by_limits


@dataclass(slots=True)
class TypeStats:
    queue: str
    task_type: str
    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Status})
    runnable: int = 0
    oldest_runnable_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task_type": self.task_type,
            "counts": self.counts,
            "runnable": self.runnable,
            "oldest_runnable_seconds": self.oldest_runnable_seconds,
        }


def backlog(dsn: str) -> list[TypeStats]:
    with session(dsn) as conn:
        rows = store.counts_by_status(conn)
    by_key: dict[tuple[str, str], TypeStats] = {}
    for row in rows:
        key = (row["queue"], row["task_type"])
        entry = by_key.setdefault(key, TypeStats(queue=key[0], task_type=key[1]))
        entry.counts[row["status"]] = int(row["total"])
        entry.runnable += int(row["runnable"])
        age = row["oldest_runnable_seconds"]
        if age is not None:
            entry.oldest_runnable_seconds = max(entry.oldest_runnable_seconds or 0.0, float(age))
    return [by_key[k] for k in sorted(by_key)]


# --- the operator's report (`taskq stats`) -----------------------------------------------------


@dataclass(slots=True)
class TypeReport:
    queue: str
    task_type: str
    backlog: dict[str, int] = field(default_factory=dict)
    oldest_runnable_seconds: float | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    per_minute: float = 0.0
    success_rate: float | None = None
    failure_rate: float | None = None
    run_seconds: list[float] | None = None  # p50, p95, p99
    dispatch_seconds: list[float] | None = None
    retries: dict[int, int] = field(default_factory=dict)
    dead_letter_growth: int = 0
    paused: bool = False
    breaker: str = "CLOSED"
    oldest_retry_seconds: float | None = None
    limits: dict[str, Any] | None = None
    """Flow limits of the type: max_running, running, rate_text, tokens, held (due tasks a
    limit holds back right now)."""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class Report:
    minutes: int
    types: list[TypeReport]
    capacity: dict[str, dict[str, int]]  # queue -> {slots, workers, running}
    pauses: list[dict[str, Any]]
    breakers: list[dict[str, Any]]
    protection: dict[str, Any]
    health: dict[str, Any] | None
    standby: bool = False  # this server is a hot standby (read-only)
    replication: list[dict[str, Any]] = field(default_factory=list)  # standbys of this server
    not_claiming: list[dict[str, Any]] = field(default_factory=list)
    """Live workers that heart-beat but claim nothing (memory guard), with why and how long."""
    limits: list[dict[str, Any]] = field(default_factory=list)
    """Every type with flow limits (``taskq limits``), with running, waiting and held."""
    switches: list[dict[str, Any]] = field(default_factory=list)
    blocked_keys: list[dict[str, Any]] = field(default_factory=list)
    """Ordering keys whose head task holds later tasks back (store.blocked_ordering_keys)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "limits": self.limits,
            "switches": self.switches,
            "minutes": self.minutes,
            "types": [t.as_dict() for t in self.types],
            "capacity": self.capacity,
            "pauses": self.pauses,
            "breakers": self.breakers,
            "protection": self.protection,
            "health": self.health,
            "standby": self.standby,
            "replication": self.replication,
            "not_claiming": self.not_claiming,
            "blocked_keys": self.blocked_keys,
        }


_FAILURES = ("failed", "dead_lettered", "permanent")
_ATTEMPTS = ("success", "failed", "dead_lettered", "permanent", "retried", "rescued")


def report(dsn: str, minutes: int = 15) -> Report:
    """Everything `taskq stats` shows, for the last ``minutes``, in a few index-friendly
    queries (the live rows through their partial indexes, history from the minute counters)."""
    with session(dsn) as conn:
        backlog_rows = store.backlog(conn)
        outcomes = store.window_outcomes(conn, minutes)
        latencies = store.window_latencies(conn, minutes)
        retries = store.window_retries(conn, minutes)
        growth = {
            (r["queue"], r["task_type"]): int(r["n"]) for r in store.dlq_growth(conn, minutes)
        }
        capacity_rows = store.capacity(conn)
        not_claiming = store.workers_not_claiming(conn)
        pauses = store.list_pauses(conn)
        breakers = store.list_breakers(conn)
        protection = store.protection_get(conn)
        health = store.db_health(conn)
        standby = store.in_recovery(conn)
        replication = store.replication(conn)
        flow = {r["task_type"]: r for r in store.limits_list(conn)}
        switches = store.switch_list(conn)
        blocked = store.blocked_ordering_keys(conn)
    for f in flow.values():
        f["held"] = held_by_limits(f)
    types: dict[tuple[str, str], TypeReport] = {}

    def entry(queue: str, task_type: str) -> TypeReport:
        return types.setdefault((queue, task_type), TypeReport(queue, task_type))

    for row in backlog_rows:
        e = entry(row["queue"], row["task_type"])
        e.backlog = {
            k: int(row[k])
            for k in (
                "runnable",
                "scheduled",
                "retry_waiting",
                "processing",
                "dead_letter",
                "retry_due",
            )
        }
        e.oldest_runnable_seconds = row["oldest_runnable_seconds"]
        e.oldest_retry_seconds = row["oldest_retry_seconds"]
    for row in outcomes:
        e = entry(row["queue"], row["task_type"])
        e.outcomes[row["outcome"]] = e.outcomes.get(row["outcome"], 0) + int(row["n"])
    for row in latencies:
        e = entry(row["queue"], row["task_type"])
        e.run_seconds = row["run_seconds"]
        e.dispatch_seconds = row["dispatch_seconds"]
    for row in retries:
        e = entry(row["queue"], row["task_type"])
        e.retries[int(row["retry_count"])] = int(row["tasks"])
    paused_types = {p["name"] for p in pauses if p["kind"] == "task_type"}
    paused_queues = {p["name"] for p in pauses if p["kind"] == "queue"}
    breaker_state = {b["task_type"]: b["state"] for b in breakers}
    for e in types.values():
        done = sum(n for k, n in e.outcomes.items() if k in ("success", "duplicate"))
        e.per_minute = done / minutes
        attempts = sum(e.outcomes.get(k, 0) for k in _ATTEMPTS)
        if attempts:
            e.success_rate = e.outcomes.get("success", 0) / attempts
            e.failure_rate = sum(e.outcomes.get(k, 0) for k in _FAILURES) / attempts
        e.dead_letter_growth = growth.get((e.queue, e.task_type), 0)
        e.paused = e.task_type in paused_types or e.queue in paused_queues
        e.breaker = breaker_state.get(e.task_type, "CLOSED")
        if e.task_type in flow:
            f = flow[e.task_type]
            e.limits = {
                "max_running": f["max_running"],
                "max_running_per_key": f["max_running_per_key"],
                "running": int(f["running"]),
                "rate": f["rate_text"],
                "tokens": f["tokens"],
                "fair": f["fair"],
                "held": f["held"],
            }
    running: dict[str, int] = {}
    for e in types.values():
        running[e.queue] = running.get(e.queue, 0) + e.backlog.get("processing", 0)
    capacity = {
        r["queue"]: {
            "slots": int(r["slots"]),
            "workers": int(r["workers"]),
            "running": running.get(r["queue"], 0),
        }
        for r in capacity_rows
    }
    for queue, n in running.items():
        capacity.setdefault(queue, {"slots": 0, "workers": 0, "running": n})
    return Report(
        minutes=minutes,
        types=[types[k] for k in sorted(types)],
        capacity=capacity,
        pauses=pauses,
        breakers=breakers,
        protection=protection,
        health=health,
        standby=standby,
        replication=replication,
        not_claiming=not_claiming,
        limits=list(flow.values()),
        switches=switches,
        blocked_keys=blocked,
    )


# --- capacity planning (`taskq plan`) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    task_type: str | None
    tasks: int
    within_seconds: float
    mean_seconds: float
    source: str
    throughput_per_second: float
    concurrency_exact: float
    slots: int
    processes: int
    slots_per_process: int
    warnings: list[str]
    max_running: int | None = None
    rate_per_second: float | None = None
    limited_seconds: float | None = None
    """How long the tasks take under the type's cap and rate (None: no limit binds)."""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


SANE_SLOTS_PER_PROCESS = 256


def plan(
    *,
    tasks: int,
    within_seconds: float,
    mean_seconds: float,
    source: str,
    task_type: str | None = None,
    processes: int | None = None,
    cpu_bound: bool = False,
    cpus: int | None = None,
    max_running: int | None = None,
    rate_per_second: float | None = None,
) -> Plan:
    """Little's law: concurrency = throughput x mean duration, rounded up to whole slots, and
    a process x slot layout: I/O-bound work packs slots into one process (threads and
    coroutines wait cheaply); CPU-bound work needs one process per core."""
    if tasks <= 0 or within_seconds <= 0 or mean_seconds <= 0:
        raise ValueError("tasks, the window and the mean duration must be positive")
    throughput = tasks / within_seconds
    exact = throughput * mean_seconds
    slots = max(1, math.ceil(exact - 1e-9))
    warnings: list[str] = []
    cores = cpus or os.cpu_count() or 1
    if processes is None:
        if cpu_bound:
            processes = min(slots, cores)
        else:
            processes = max(1, math.ceil(slots / SANE_SLOTS_PER_PROCESS))
    per_process = math.ceil(slots / processes)
    if cpu_bound and slots > cores:
        warnings.append(
            f"CPU-bound work needs {slots} cores at once; this machine has {cores}: "
            f"the window cannot be met on one host"
        )
    if not cpu_bound and per_process > SANE_SLOTS_PER_PROCESS:
        warnings.append(
            f"{per_process} slots in one process is more than a sane pool "
            f"({SANE_SLOTS_PER_PROCESS}); use --processes {math.ceil(slots / 64)} or more"
        )
    if exact < 0.05:
        warnings.append("the load is tiny: one slot idles most of the time")
    limited_seconds = None
    if max_running is not None or rate_per_second is not None:
        # The flow limits bound the throughput whatever the slots: a cap of N runs at most N
        # at once (N / mean per second), a rate starts at most that many per second.
        ceiling = min(
            max_running / mean_seconds if max_running is not None else math.inf,
            rate_per_second if rate_per_second is not None else math.inf,
        )
        if ceiling < throughput:
            limited_seconds = tasks / ceiling
            need = _human_seconds(limited_seconds)
            if max_running is not None and max_running / mean_seconds <= ceiling:
                warnings.append(
                    f"with max_running={max_running} and a mean of {_human_seconds(mean_seconds)},"
                    f" {tasks} tasks need {need}: raise the cap to {slots} to finish in"
                    f" {_human_seconds(within_seconds)}"
                )
            if rate_per_second is not None and rate_per_second <= ceiling:
                warnings.append(
                    f"with a rate of {_human_rate(rate_per_second, math.floor)}, {tasks} tasks"
                    f" need {need}: raise the rate to {_human_rate(throughput, math.ceil)} to"
                    f" finish in {_human_seconds(within_seconds)}"
                )
    return Plan(
        task_type=task_type,
        tasks=tasks,
        within_seconds=within_seconds,
        mean_seconds=mean_seconds,
        source=source,
        throughput_per_second=throughput,
        concurrency_exact=exact,
        slots=slots,
        processes=processes,
        slots_per_process=per_process,
        warnings=warnings,
        max_running=max_running,
        rate_per_second=rate_per_second,
        limited_seconds=limited_seconds,
    )


def _human_seconds(seconds: float) -> str:
    """29 min, 116 h, 2.5 d: the unit a planner would say."""
    for unit, size, above in (("d", 86400.0, 7), ("h", 3600.0, 2), ("min", 60.0, 1)):
        if seconds >= above * size:
            value = seconds / size
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{seconds:.1f} s"


def _human_rate(per_second: float, rounding: Any) -> str:
    """20/s, 90/m, 15/h: the largest unit with at least one task in it."""
    for unit, size in (("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if per_second * size >= 1 or unit == "h":
            return f"{max(1, rounding(per_second * size))}/{unit}"
    raise AssertionError("unreachable")


def type_limits(dsn: str, task_type: str) -> tuple[int | None, float | None]:
    """The cap and rate (per second) the database holds for ``task_type``."""
    with session(dsn) as conn:
        for row in store.limits_list(conn):
            if row["task_type"] == task_type:
                return row["max_running"], row["rate"]
    return None, None


def measured_mean(dsn: str, *, task_type: str | None, history_seconds: float) -> tuple[float, str]:
    """Mean run time of successful attempts over the history window."""
    with session(dsn) as conn:
        rows = store.mean_run_seconds(conn, window_seconds=history_seconds, task_type=task_type)
    total = sum(int(r["n"]) for r in rows)
    if not total:
        what = f"{task_type!r}" if task_type else "any task type"
        raise TaskqError(
            f"no successful runs of {what} in the history window to measure; "
            "pass --duration or --observed/--at-concurrency"
        )
    mean = sum(float(r["mean"]) * int(r["n"]) for r in rows) / total
    return mean, f"measured: mean of {total} successful run(s)"


def parse_duration(text: str) -> float:
    """``"48h"``, ``"7d"``, ``"30m"``, ``"90s"`` -> seconds."""
    from taskq.schedules import parse_every

    try:
        return parse_every(text)
    except TaskqError:
        raise ValueError(f"bad duration {text!r}: use e.g. 90s, 30m, 48h, 7d") from None
