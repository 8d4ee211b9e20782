"""Operator switches: pause/resume consumption of a task type or a queue, and the circuit
breakers and protection level. Each change is one statement that also writes the audit row
and NOTIFYs taskq_control, so every worker obeys within a second."""

from __future__ import annotations

from typing import Any, Literal

from taskq.control.state import Level
from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError
from taskq.model import check_name
from taskq.ops.dlq import actor

Kind = Literal["task_type", "queue"]


def pause(
    dsn: str, *, kind: Kind, name: str, note: str | None = None, by: str | None = None
) -> bool:
    """Stop claiming ``name``; its backlog waits. False if it was paused already. ``by`` (here
    and below) names the actor when it is not this OS user: the dashboard acts for someone."""
    check_name(kind.replace("_", " "), name)
    with session(dsn) as conn:
        return store.pause(conn, kind=kind, name=name, actor=by or actor(), note=note)


def resume(
    dsn: str, *, kind: Kind, name: str, note: str | None = None, by: str | None = None
) -> bool:
    """Claim ``name`` again (workers are woken at once). False if it was not paused."""
    check_name(kind.replace("_", " "), name)
    with session(dsn) as conn:
        return store.resume(conn, kind=kind, name=name, actor=by or actor(), note=note)


def pauses(dsn: str) -> list[dict[str, Any]]:
    with session(dsn) as conn:
        return store.list_pauses(conn)


def circuit_status(dsn: str) -> dict[str, Any]:
    with session(dsn) as conn:
        protection = store.protection_get(conn)
        breakers = store.list_breakers(conn)
    level = Level(int(protection["level"]))
    return {
        "level": int(level),
        "level_name": level.name,
        "reason": protection["reason"],
        "changed_at": protection["changed_at"],
        "changed_by": protection["changed_by"],
        "breakers": breakers,
    }


def circuit_reset(
    dsn: str, *, task_type: str | None = None, note: str | None = None, by: str | None = None
) -> dict[str, Any]:
    """Close breakers (one type, or all) and, when resetting everything, bring the level back to
    L0 — the only way out of L4 EMERGENCY."""
    who = by or actor()
    with session(dsn) as conn:
        closed = store.breaker_reset(conn, task_type=task_type, actor=who, note=note)
        lowered = False
        if task_type is None:
            lowered = store.protection_set(
                conn,
                level=0,
                reason=f"reset by {who}" + (f": {note}" if note else ""),
                actor=who,
                force=True,
            )
    return {"closed_breakers": closed, "level_reset": lowered}


def set_level(dsn: str, level: int, *, note: str | None = None, by: str | None = None) -> bool:
    """An operator sets the level by hand (e.g. L4 to stop all dispatch during an incident)."""
    if not 0 <= level <= 4:
        raise ConfigError("the level is 0 (NORMAL) to 4 (EMERGENCY)")
    who = by or actor()
    with session(dsn) as conn:
        return store.protection_set(
            conn,
            level=level,
            reason=f"set by {who}" + (f": {note}" if note else ""),
            actor=who,
            force=True,
        )


# --- business switches -------------------------------------------------------------------------


def switch_set(
    dsn: str, name: str, enabled: bool, *, note: str | None = None, by: str | None = None
) -> bool:
    """Turn a business switch on or off; True when it changed. Audited; every worker's cache
    is refreshed by NOTIFY within a second. (A pause stops consumption; a switch is read by
    handler code, which decides what "off" means.)"""
    check_name("switch name", name)
    with session(dsn) as conn:
        return store.switch_set(conn, name=name, enabled=enabled, note=note, by=by or actor())


def switch_list(dsn: str) -> list[dict[str, Any]]:
    with session(dsn) as conn:
        return store.switch_list(conn)
