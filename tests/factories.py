"""Rows in any state, with backdated times, without running a worker.

``task(conn, status="PROCESSING", age=60)`` inserts one ``taskq.tasks`` row the way the product
would have left it in that state: a PROCESSING row has a token, a worker and a ``started_at``;
a finished row has ``finished_at``; a FAILED row has a ``next_retry_time``. Times are relative
to the database clock (``now() - age``), so a test asks for "an attempt that started ten
minutes ago" rather than computing timestamps. Any other column can be given by name.

``conn`` is a psycopg connection (autocommit or inside the caller's transaction) or a DSN.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql

_FINISHED = {"SUCCESS", "DEAD_LETTER", "FAILED"}


def _secs(value: float | None) -> Any:
    return None if value is None else float(value)


def task(
    conn: psycopg.Connection[Any] | str,
    *,
    task_type: str = "t",
    queue: str = "default",
    status: str = "PENDING",
    age: float = 0.0,
    started_ago: float | None = None,
    finished_ago: float | None = None,
    retry_in: float | None = None,
    worker_id: str | None = None,
    **columns: Any,
) -> int:
    """Insert one task row in ``status``; return its id.

    ``age`` backdates ``created_at``/``scheduled_at`` (seconds). For PROCESSING rows
    ``started_ago`` (default ``age``) backdates ``started_at``; for finished rows
    ``finished_ago`` (default 0) backdates ``finished_at``; for FAILED rows ``retry_in``
    (default 0: runnable now) sets ``next_retry_time`` relative to now.
    """
    values: dict[str, Any] = {"task_type": task_type, "queue": queue, "status": status}
    times: dict[str, float | None] = {"created_at": age, "scheduled_at": age, "updated_at": 0.0}
    if status in ("PROCESSING", *_FINISHED):
        times["started_at"] = age if started_ago is None else started_ago
        values.setdefault("effective_id", uuid.uuid4())
        values["worker_id"] = worker_id or "factory-worker"
        values.setdefault("max_retry_count", 5)
        values.setdefault("timeout_seconds", 1800)
    if status in _FINISHED:
        times["finished_at"] = 0.0 if finished_ago is None else finished_ago
    if status == "FAILED":
        times["next_retry_time"] = -(0.0 if retry_in is None else retry_in)
        values.setdefault("retry_count", 1)
    if "payload" in columns:
        columns["payload"] = psycopg.types.json.Jsonb(columns["payload"])
    values.update(columns)
    for name in list(times):
        if name in values:  # an explicit timestamp wins over the relative one
            del times[name]
    names = [*values, *times]
    exprs = [sql.Placeholder(n) for n in values] + [
        sql.SQL("now() - make_interval(secs => {})").format(sql.Placeholder(n)) for n in times
    ]
    statement = sql.SQL("INSERT INTO taskq.tasks ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names), sql.SQL(", ").join(exprs)
    )
    params = {**values, **{n: _secs(v) for n, v in times.items()}}
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True) as own:
            row = own.execute(statement, params).fetchone()
    else:
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    return int(row[0])


def tasks(conn: psycopg.Connection[Any] | str, n: int, **kwargs: Any) -> list[int]:
    """``n`` rows of :func:`task` with the same arguments."""
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True) as own:
            return [task(own, **kwargs) for _ in range(n)]
    return [task(conn, **kwargs) for _ in range(n)]


def worker(
    conn: psycopg.Connection[Any] | str,
    worker_id: str = "factory-worker",
    *,
    heartbeat_ago: float = 0.0,
    lease_seconds: float = 30.0,
    **columns: Any,
) -> str:
    """Insert one ``taskq.workers`` row whose last heartbeat was ``heartbeat_ago`` seconds ago."""
    values: dict[str, Any] = {
        "id": worker_id,
        "host": "factory-host",
        "pid": 0,
        "version": "test",
        "lease_seconds": lease_seconds,
        **columns,
    }
    statement = sql.SQL(
        "INSERT INTO taskq.workers ({}, heartbeat_at) VALUES ({}, "
        "now() - make_interval(secs => {})) RETURNING id"
    ).format(
        sql.SQL(", ").join(sql.Identifier(n) for n in values),
        sql.SQL(", ").join(sql.Placeholder(n) for n in values),
        sql.Placeholder("_ago"),
    )
    params = {**values, "_ago": float(heartbeat_ago)}
    if isinstance(conn, str):
        with psycopg.connect(conn, autocommit=True) as own:
            own.execute(statement, params)
    else:
        conn.execute(statement, params)
    return worker_id
