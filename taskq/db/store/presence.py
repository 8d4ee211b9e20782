"""The statements of ``sql/queries/presence.sql``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _sync_cursor,
)
from taskq.db.store.arrays import BigintArray, UuidArray


def worker_heartbeat(
    conn: psycopg.Connection[Any],
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues_json: str,
    version: str,
    lease_seconds: float,
    held: Sequence[tuple[int, uuid.UUID]],
    claiming_stopped: str | None = None,
) -> tuple[list[int], list[tuple[int, uuid.UUID]]]:
    """Refresh this worker's presence. Returns (the presented attempts that were taken away,
    the (id, token) of PROCESSING rows under this worker that it did not present)."""
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("worker_heartbeat"),
            {
                "id": worker_id,
                "host": host,
                "pid": pid,
                "queues": queues_json,
                "version": version,
                "lease_seconds": lease_seconds,
                "ids": BigintArray(h[0] for h in held),
                "tokens": UuidArray(h[1] for h in held),
                "stopped": claiming_stopped,
            },
        )
        found = cur.fetchall()
    lost = [int(r["id"]) for r in found if r["kind"] == "lost"]
    strays = [(int(r["id"]), r["token"]) for r in found if r["kind"] == "stray"]
    return lost, strays


def worker_unregister(conn: psycopg.Connection[Any], worker_id: str) -> None:
    conn.execute(query("worker_unregister"), {"id": worker_id})


def list_workers(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("list_workers"))
        return cur.fetchall()


def _registry_params(worker_id: str, types: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "task_types": [t["task_type"] for t in types],
        "queues": [t["queue"] for t in types],
        "max_retry_counts": [t["max_retry_count"] for t in types],
        "timeouts": [t["timeout_seconds"] for t in types],
        "reconciled": [bool(t["reconciled"]) for t in types],
    }


def register_task_types(
    conn: psycopg.Connection[Any], worker_id: str, types: Sequence[Mapping[str, Any]]
) -> None:
    """Upsert the type registry: ``types`` are dicts of task_type, queue, max_retry_count,
    timeout_seconds (each but task_type may be None) and reconciled."""
    if types:
        conn.execute(query("register_task_types"), _registry_params(worker_id, types))


async def aregister_task_types(
    conn: psycopg.AsyncConnection[Any], worker_id: str, types: Sequence[Mapping[str, Any]]
) -> None:
    if types:
        await conn.execute(query("register_task_types"), _registry_params(worker_id, types))


def list_task_types(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("list_task_types"))
        return cur.fetchall()
