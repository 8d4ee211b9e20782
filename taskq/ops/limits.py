"""Flow limits as operators see and change them: ``taskq limits``, the dashboard, metrics.

Changes go through SECURITY DEFINER functions that write the audit row in the same
transaction and NOTIFY taskq_control; the next claim of every worker obeys (the claim reads the
limits row under its lock, so there is no cache to refresh)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError
from taskq.model import check_name, held_by_limits, parse_rate
from taskq.ops.dlq import actor


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What ``taskq limits set`` asks for. None leaves a setting as it is; ``clear`` names the
    settings to remove (``max_running``, ``max_running_per_key``, ``rate``)."""

    max_running: int | None = None
    max_running_per_key: int | None = None
    rate: str | None = None
    burst: float | None = None
    fair: bool | None = None
    clear: tuple[str, ...] = ()


def list_limits(dsn: str) -> dict[str, Any]:
    with session(dsn) as conn:
        types = store.limits_list(conn)
        queues = store.queue_limits_list(conn)
    for row in types:
        row["held"] = held_by_limits(row)
    return {"task_types": types, "queues": queues}


def set_limits(
    dsn: str, task_type: str, change: LimitChange, *, note: str | None = None, by: str | None = None
) -> dict[str, Any]:
    check_name("task type", task_type)
    for name, value in (
        ("--max-running", change.max_running),
        ("--max-running-per-key", change.max_running_per_key),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1 (or 'none' to remove it)")
    rate = parse_rate(change.rate) if change.rate is not None else None
    if change.burst is not None and change.burst < 1:
        raise ConfigError("--burst must be at least 1")
    unknown = set(change.clear) - {"max_running", "max_running_per_key", "rate"}
    if unknown:
        raise ConfigError(f"cannot clear {sorted(unknown)}")
    with session(dsn) as conn:
        if change.burst is not None and rate is None and "rate" not in change.clear:
            current = [r for r in store.limits_list(conn) if r["task_type"] == task_type]
            if not current or current[0]["rate"] is None:
                raise ConfigError("--burst needs a rate: give --rate too")
        return store.limits_set(
            conn,
            task_type=task_type,
            actor=by or actor(),
            max_running=change.max_running,
            max_running_per_key=change.max_running_per_key,
            rate=rate,
            rate_text=change.rate.strip() if change.rate is not None else None,
            burst=change.burst,
            fair=change.fair,
            clear=list(change.clear),
            note=note,
        )


def reset_limits(
    dsn: str, task_type: str, *, note: str | None = None, by: str | None = None
) -> bool:
    """Drop the type's limits row; workers write the code's limits again when they start."""
    check_name("task type", task_type)
    with session(dsn) as conn:
        return store.limits_reset(conn, task_type=task_type, actor=by or actor(), note=note)


def set_retry_share(
    dsn: str, queue: str, share: float, *, note: str | None = None, by: str | None = None
) -> float:
    check_name("queue", queue)
    if not 0 <= share <= 1:
        raise ConfigError("--retry-share is a fraction from 0 to 1 (e.g. 0.5)")
    with session(dsn) as conn:
        return store.queue_limits_set(
            conn, queue=queue, retry_share=share, actor=by or actor(), note=note
        )
