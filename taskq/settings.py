"""Every default of taskq's tunables, in one place: the worker's settings, the protection
settings, and the defaults of the operator commands. The CLI reads its option defaults from
here (``default(WorkerSettings, "poll_interval_seconds")``), so a default is written once.

Pure: no I/O, no imports beyond the standard library.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ProtectionSettings:
    """Circuit breakers and the protection level (``taskq.control.protection``)."""

    breaker_threshold: int = 5
    """Consecutive failures that open a type's breaker; 0 turns breakers off (no trips)."""
    breaker_cooldown_seconds: float = 30.0
    breaker_window_seconds: float = 300.0
    breaker_failure_rate: float = 0.5
    breaker_min_volume: int = 20
    probe_timeout_seconds: float = 300.0
    empty_probe_wait_seconds: float = 5.0
    """After a probe of a HALF_OPEN type found no task of that type, no worker looks for one
    again for this long: each look reads the queue's runnable rows of every type until one of
    that type turns up (the claim index is by queue), so a type with nothing to run beside a
    long backlog of other types would cost every claim round that whole backlog."""
    level_thresholds: tuple[int, int, int, int] = (2, 3, 4, 6)
    """How many task types with a non-closed breaker raise the level to L1, L2, L3, L4."""
    calm_seconds: float = 60.0
    evaluate_interval_seconds: float = 1.0


DEFAULT_CONCURRENCY = 10
"""Slots of a queue named without a count (``--queues sms``), or of every queue the app's
tasks use when no queues are given."""
PRUNE_INTERVAL_SECONDS = 600.0
"""How often the leader prunes (``--prune-after``)."""
STATISTICS_INTERVAL_SECONDS = 30.0
"""How often the leader checks that taskq.tasks has fresh statistics, and analyzes it when
autovacuum does not cover it (sql/ddl/0033_analyze_when_stale.sql)."""
CRASH_LIMIT = 3
"""Crashes of a worker process beside other attempts that a task is not charged for (the
reaper's crash judgement, sql/queries/finish.sql reap_attempts); from the next one on, such a
crash is charged to every attempt that died in it, so a crasher that is never run alone ends."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Tunables of one worker process. Defaults suit production; tests shrink them."""

    queues: dict[str, int] = field(default_factory=dict)
    poll_interval_seconds: float = 2.0
    shutdown_timeout_seconds: float = 30.0
    progress_interval_seconds: float = 0.25
    heartbeat_interval_seconds: float = 10.0
    """The lease is three heartbeats: a dead worker's attempts are rescued ~30 s after it died."""
    reaper_interval_seconds: float = 5.0
    timeout_grace_seconds: float = 10.0
    """The reaper rescues an attempt this long after its timeout (the owner enforces it first)."""
    crash_limit: int = CRASH_LIMIT
    max_memory_bytes: int | None = None
    memory_grace_seconds: float = 60.0
    """Over ``max_memory_bytes`` with nothing in flight for this long, the worker exits with code
    75 for its supervisor (systemd, ``--processes``, a container runtime) to restart it."""
    pgbouncer: bool = False
    """Connections go through PgBouncer in transaction mode: never prepare statements
    server-side (``db.pooler_kwargs`` says why). LISTEN then needs ``listen_dsn`` or no LISTEN."""
    listen: bool = True
    """LISTEN for wake-ups. Without it the worker only polls: a new task can wait up to
    ``poll_interval_seconds`` (plus jitter) before it is claimed."""
    listen_dsn: str | None = None
    """Where to LISTEN: a direct connection to PostgreSQL, because LISTEN is session state that a
    transaction pooler cannot keep. None: the worker's own DSN."""
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    prune_after_seconds: float | None = None
    """Delete SUCCESS rows older than this (leader only, every 10 minutes); None keeps all."""
    protection: ProtectionSettings = field(default_factory=ProtectionSettings)
    control_interval_seconds: float = 1.0
    gauge_interval_seconds: float = 10.0
    claim_coalesce_seconds: float = 0.005
    """After a claim round that found the queue drained, wake-ups start rounds at once while
    they are rare, and no more than one per this period (after a burst of a few) however many
    NOTIFYs arrive (anyone who can connect can send them)."""
    log_payloads: bool = False
    """Payloads are never logged unless this is set (they may hold personal data)."""

    @property
    def lease_seconds(self) -> float:
        return 3 * self.heartbeat_interval_seconds


# Operator commands.
REAP_ORPHAN_AFTER_SECONDS = 30.0
"""``taskq reap --orphan-after``: an attempt whose worker row is missing is rescued once it is
this old (a worker uses its own lease)."""
DLQ_LIST_LIMIT = 50
DASHBOARD_HOST = "127.0.0.1"
DASHBOARD_PORT = 8080
LOG_FORMAT = "auto"
LOG_LEVEL = "info"
EVENT_LOOP = "auto"
"""``taskq worker --event-loop``: uvloop when it is installed, else asyncio's."""


def default(cls: type[Any], name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (for CLI option defaults)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise KeyError(f"{cls.__name__}.{name} has no default")
