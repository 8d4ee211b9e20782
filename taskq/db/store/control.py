"""The statements of ``sql/queries/control.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _aall,
    _all,
)


async def control_state(conn: psycopg.AsyncConnection[Any]) -> Row:
    return (await _aall(conn, "control_state"))[0]


def pause(
    conn: psycopg.Connection[Any], *, kind: str, name: str, actor: str, note: str | None
) -> bool:
    """True if it was not paused already."""
    found = _all(conn, "pause", {"kind": kind, "name": name, "actor": actor, "note": note})
    return bool(found[0]["changed"])


def resume(
    conn: psycopg.Connection[Any], *, kind: str, name: str, actor: str, note: str | None
) -> bool:
    found = _all(conn, "resume", {"kind": kind, "name": name, "actor": actor, "note": note})
    return bool(found[0]["changed"])


def list_pauses(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "list_pauses")


def list_breakers(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "list_breakers")


def breaker_reset(
    conn: psycopg.Connection[Any], *, task_type: str | None, actor: str, note: str | None
) -> list[str]:
    found = _all(conn, "breaker_reset", {"task_type": task_type, "actor": actor, "note": note})
    return [str(r["task_type"]) for r in found]


async def breaker_half_open(
    conn: psycopg.AsyncConnection[Any], cooldown_seconds: float
) -> list[str]:
    return [
        str(r["task_type"])
        for r in await _aall(conn, "breaker_half_open", {"cooldown": cooldown_seconds})
    ]


async def breaker_trip_by_rate(
    conn: psycopg.AsyncConnection[Any], *, window_seconds: float, rate: float, min_volume: int
) -> list[str]:
    found = await _aall(
        conn,
        "breaker_trip_by_rate",
        {"window": window_seconds, "rate": rate, "min_volume": min_volume},
    )
    return [str(r["task_type"]) for r in found]


async def breaker_take_probe(
    conn: psycopg.AsyncConnection[Any],
    *,
    task_type: str,
    worker_id: str,
    probe_timeout: float,
    empty_wait: float,
) -> bool:
    found = await _aall(
        conn,
        "breaker_take_probe",
        {
            "task_type": task_type,
            "worker_id": worker_id,
            "probe_timeout": probe_timeout,
            "empty_wait": empty_wait,
        },
    )
    return bool(found)


async def breaker_give_back_probe(
    conn: psycopg.AsyncConnection[Any], *, task_type: str, worker_id: str
) -> None:
    await conn.execute(
        query("breaker_give_back_probe"), {"task_type": task_type, "worker_id": worker_id}
    )


def protection_get(conn: psycopg.Connection[Any]) -> Row:
    return _all(conn, "protection_get")[0]


def _protection(level: int, reason: str, actor: str, force: bool) -> dict[str, Any]:
    return {"level": level, "reason": reason, "actor": actor, "force": force}


def protection_set(
    conn: psycopg.Connection[Any], *, level: int, reason: str, actor: str, force: bool
) -> bool:
    return bool(_all(conn, "protection_set", _protection(level, reason, actor, force)))


async def aprotection_set(
    conn: psycopg.AsyncConnection[Any], *, level: int, reason: str, actor: str, force: bool
) -> bool:
    return bool(await _aall(conn, "protection_set", _protection(level, reason, actor, force)))


async def failing_types(conn: psycopg.AsyncConnection[Any]) -> list[Row]:
    return await _aall(conn, "failing_types")


async def leader_elect(
    conn: psycopg.AsyncConnection[Any], *, name: str, worker_id: str, ttl_seconds: float
) -> bool:
    found = await _aall(
        conn, "leader_elect", {"name": name, "worker_id": worker_id, "ttl": ttl_seconds}
    )
    return bool(found)


async def leader_resign(conn: psycopg.AsyncConnection[Any], *, name: str, worker_id: str) -> None:
    await conn.execute(query("leader_resign"), {"name": name, "worker_id": worker_id})
