"""The only module that executes SQL. One small typed function per named query.

Functions that take the *caller's* connection (enqueue) accept a psycopg connection or cursor,
sync or async, and run inside whatever transaction the caller has open. Worker functions are
async and take a connection from the worker's pool; CLI functions are sync.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, tuple_row

from taskq.errors import InvalidTask
from taskq.model import ClaimedTask, Finished, Status, TaskOptions
from taskq.sqlfiles import query

Row = dict[str, Any]
SyncTarget = psycopg.Connection[Any] | psycopg.Cursor[Any]
AsyncTarget = psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any]


def _sync_cursor(target: SyncTarget) -> psycopg.Cursor[Row]:
    conn = target.connection if isinstance(target, psycopg.Cursor) else target
    return conn.cursor(row_factory=dict_row)


def _async_cursor(target: AsyncTarget) -> psycopg.AsyncCursor[Row]:
    conn = target.connection if isinstance(target, psycopg.AsyncCursor) else target
    return conn.cursor(row_factory=dict_row)


def _all(
    conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any] | None = None
) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query(name), params or {})
        return cur.fetchall()


async def _aall(
    conn: psycopg.AsyncConnection[Any], name: str, params: Mapping[str, Any] | None = None
) -> list[Row]:
    async with _async_cursor(conn) as cur:
        await cur.execute(query(name), params or {})
        return await cur.fetchall()


# --- enqueue (caller's connection and transaction) -------------------------------------------


def insert_task(target: SyncTarget, params: Mapping[str, Any]) -> int | None:
    """The new id, or None when a live task holds the same unique key."""
    with _sync_cursor(target) as cur:
        cur.execute(query("insert_task"), params)
        row = cur.fetchone()
    return int(row["id"]) if row else None


async def ainsert_task(target: AsyncTarget, params: Mapping[str, Any]) -> int | None:
    async with _async_cursor(target) as cur:
        await cur.execute(query("insert_task"), params)
        row = await cur.fetchone()
    return int(row["id"]) if row else None


def insert_tasks(target: SyncTarget, params: Mapping[str, Any]) -> list[Row]:
    """Rows (id, task_type, unique_key) of the tasks inserted, in item order."""
    if not params["task_types"]:
        return []
    with _sync_cursor(target) as cur:
        cur.execute(query("insert_tasks"), params)
        return cur.fetchall()


async def ainsert_tasks(target: AsyncTarget, params: Mapping[str, Any]) -> list[Row]:
    if not params["task_types"]:
        return []
    async with _async_cursor(target) as cur:
        await cur.execute(query("insert_tasks"), params)
        return await cur.fetchall()


def _copy_row(task_id: int, p: Mapping[str, Any], now: dt.datetime) -> tuple[Any, ...]:
    scheduled = p["scheduled_at"] or now
    if p["delay"]:
        scheduled = scheduled + dt.timedelta(seconds=p["delay"])
    return (
        task_id, p["task_type"], p["queue"], p["biz_id"], p["payload"], p["priority"], scheduled,
        p["max_retry_count"], p["timeout_seconds"], p["trace_id"], p["ordering_key"],
        p["parent_id"],
    )  # fmt: skip


def copy_tasks(target: SyncTarget, items: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """COPY the items (none may have a unique key); their ids in order, or None when this role
    may not set ids (then use insert_tasks). Scheduled times use the database clock."""
    with _sync_cursor(target) as cur:
        cur.execute(query("reserve_task_ids"), {"n": len(items)})
        row = cur.fetchone()
        assert row is not None
        if row["ids"] is None:
            return None
        ids: list[int] = row["ids"]
        with cur.copy(query("copy_tasks")) as copy:
            for task_id, p in zip(ids, items, strict=True):
                copy.write_row(_copy_row(task_id, p, row["now"]))
    return ids


async def acopy_tasks(target: AsyncTarget, items: Sequence[Mapping[str, Any]]) -> list[int] | None:
    async with _async_cursor(target) as cur:
        await cur.execute(query("reserve_task_ids"), {"n": len(items)})
        row = await cur.fetchone()
        assert row is not None
        if row["ids"] is None:
            return None
        ids: list[int] = row["ids"]
        async with cur.copy(query("copy_tasks")) as copy:
            for task_id, p in zip(ids, items, strict=True):
                await copy.write_row(_copy_row(task_id, p, row["now"]))
    return ids


def _key_params(keys: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    return {"task_types": [k[0] for k in keys], "unique_keys": [k[1] for k in keys]}


def find_live_tasks(
    target: SyncTarget, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """The live task holding each (task_type, unique_key), where there is one."""
    with _sync_cursor(target) as cur:
        cur.execute(query("find_live_tasks"), _key_params(keys))
        return {(r["task_type"], r["unique_key"]): int(r["id"]) for r in cur.fetchall()}


async def afind_live_tasks(
    target: AsyncTarget, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    async with _async_cursor(target) as cur:
        await cur.execute(query("find_live_tasks"), _key_params(keys))
        return {(r["task_type"], r["unique_key"]): int(r["id"]) for r in await cur.fetchall()}


# --- worker: claim and finish (async, pool connections) ----------------------------------------


async def claim_batch(
    conn: psycopg.AsyncConnection[Any],
    *,
    queue: str,
    handlers: Sequence[TaskOptions],
    limit: int,
    worker_id: str,
    retries_only: bool = False,
    probe: bool = False,
) -> list[ClaimedTask]:
    """Claim for the task types in ``handlers``; their settings fill rows that left
    max_retry_count / timeout_seconds NULL."""
    # Plain tuple rows, built straight into ClaimedTask: RETURNING lists its fields in order
    # (tests/test_units.py checks), and one dict per claimed row was wasted work.
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(
            query("claim_batch"),
            {
                "queue": queue,
                "task_types": [h.task_type for h in handlers],
                "max_retry_counts": [h.max_retry_count for h in handlers],
                "timeouts": [h.timeout_seconds for h in handlers],
                "limit": limit,
                "worker_id": worker_id,
                "retries_only": retries_only,
                "probe": probe,
            },
        )
        rows = await cur.fetchall()
    tasks = [ClaimedTask(*row) for row in rows]
    # RETURNING has no order; start them in claim order (priority, then age).
    tasks.sort(key=lambda t: (-t.priority, t.scheduled_at, t.id))
    return tasks


async def mark_success_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> set[int]:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("mark_success_many"), {"ids": list(ids), "tokens": list(tokens)})
        return {int(r["id"]) for r in await cur.fetchall()}


def _finished(row: Row | None) -> Finished | None:
    if row is None:
        return None
    return Finished(Status(row["status"]), int(row["retry_count"]), row["next_retry_time"])


async def mark_failed(
    conn: psycopg.AsyncConnection[Any],
    *,
    task_id: int,
    token: uuid.UUID,
    error: str,
    delay_seconds: float,
    jitter_seconds: float,
    after_seconds: float | None,
    counts_for_breaker: bool = True,
    breaker_threshold: int = 5,
) -> Finished | None:
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("mark_failed"),
            {
                "id": task_id,
                "token": token,
                "error": error,
                "delay": delay_seconds,
                "jitter": jitter_seconds,
                "after": after_seconds,
                "breaker": counts_for_breaker,
                "threshold": breaker_threshold,
            },
        )
        return _finished(await cur.fetchone())


async def mark_dead(
    conn: psycopg.AsyncConnection[Any], *, task_id: int, token: uuid.UUID, error: str
) -> Finished | None:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("mark_dead"), {"id": task_id, "token": token, "error": error})
        return _finished(await cur.fetchone())


async def release_many(
    conn: psycopg.AsyncConnection[Any], ids: Sequence[int], tokens: Sequence[uuid.UUID]
) -> list[int]:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("release_many"), {"ids": list(ids), "tokens": list(tokens)})
        return [int(r["id"]) for r in await cur.fetchall()]


async def set_progress(
    conn: psycopg.AsyncConnection[Any], *, task_id: int, token: uuid.UUID, progress_json: str
) -> bool:
    async with _async_cursor(conn) as cur:
        await cur.execute(
            query("set_progress"), {"id": task_id, "token": token, "progress": progress_json}
        )
        return cur.rowcount == 1


# --- operators (sync, CLI) ---------------------------------------------------------------------


def get_task(conn: psycopg.Connection[Any], task_id: int) -> Row | None:
    with _sync_cursor(conn) as cur:
        cur.execute(query("get_task"), {"id": task_id})
        return cur.fetchone()


def audit_for_task(conn: psycopg.Connection[Any], task_id: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("audit_for_task"), {"id": task_id})
        return cur.fetchall()


def dlq_list(conn: psycopg.Connection[Any], *, task_type: str | None, limit: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("dlq_list"), {"task_type": task_type, "limit": limit})
        return cur.fetchall()


def dlq_select(
    conn: psycopg.Connection[Any], *, ids: Sequence[int] | None, task_type: str | None
) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("dlq_select"),
            {"ids": list(ids) if ids is not None else None, "task_type": task_type},
        )
        return cur.fetchall()


def dlq_requeue(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int] | None,
    task_type: str | None,
    reset: bool,
    actor: str,
    note: str | None,
) -> list[int]:
    with _sync_cursor(conn) as cur:
        try:
            cur.execute(
                query("dlq_requeue"),
                {
                    "ids": list(ids) if ids is not None else None,
                    "task_type": task_type,
                    "reset": reset,
                    "actor": actor,
                    "note": note,
                },
            )
        except psycopg.errors.UniqueViolation as exc:
            detail = exc.diag.message_detail or ""
            raise InvalidTask(
                f"cannot requeue, nothing changed: a live task holds the same unique key. {detail}"
            ) from None
        return [int(r["id"]) for r in cur.fetchall()]


def dlq_discard(
    conn: psycopg.Connection[Any],
    *,
    ids: Sequence[int] | None,
    task_type: str | None,
    actor: str,
    note: str | None,
) -> list[int]:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("dlq_discard"),
            {
                "ids": list(ids) if ids is not None else None,
                "task_type": task_type,
                "actor": actor,
                "note": note,
            },
        )
        return [int(r["id"]) for r in cur.fetchall()]


def counts_by_status(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("counts_by_status"))
        return cur.fetchall()


# --- LISTEN ------------------------------------------------------------------------------------


async def listen(conn: psycopg.AsyncConnection[Any], channel: str) -> None:
    """LISTEN on ``channel``; the name is quoted as an identifier, never interpolated."""
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


def listen_sync(conn: psycopg.Connection[Any], channel: str) -> None:
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


def running_tasks(
    conn: psycopg.Connection[Any], *, task_type: str | None = None, limit: int = 100
) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("running_tasks"), {"task_type": task_type, "limit": limit})
        return cur.fetchall()


# --- administration (demo, tests) ---------------------------------------------------------------


def recreate_database(conn: psycopg.Connection[Any], name: str) -> None:
    """DROP (forcing out sessions) and CREATE a database; ``conn`` must be autocommit."""
    ident = sql.Identifier(name)
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))


# --- presence and the reaper -------------------------------------------------------------------


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
) -> list[int]:
    """Refresh this worker's presence; return the held attempts that were taken away."""
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
                "ids": [h[0] for h in held],
                "tokens": [h[1] for h in held],
            },
        )
        return [int(r["id"]) for r in cur.fetchall()]


def worker_unregister(conn: psycopg.Connection[Any], worker_id: str) -> None:
    conn.execute(query("worker_unregister"), {"id": worker_id})


def list_workers(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("list_workers"))
        return cur.fetchall()


async def reap(
    conn: psycopg.AsyncConnection[Any], *, grace_seconds: float, orphan_after_seconds: float
) -> tuple[list[Row], list[str]] | None:
    """One reaper pass in one transaction. None when another worker's pass holds the lock;
    else (rescued attempts, forgotten workers)."""
    async with conn.transaction(), _async_cursor(conn) as cur:
        await cur.execute(query("reaper_lock"))
        lock = await cur.fetchone()
        if not lock or not lock["acquired"]:
            return None
        await cur.execute(
            query("reap_attempts"),
            {"grace": grace_seconds, "orphan_after": orphan_after_seconds},
        )
        rescued = await cur.fetchall()
        await cur.execute(query("delete_dead_workers"))
        forgotten = [str(r["id"]) for r in await cur.fetchall()]
    return rescued, forgotten


# --- idempotent tasks and checkpoints (twins: the sync ones run in handler threads) ------------


def _key(task: ClaimedTask) -> dict[str, Any]:
    return {"task_type": task.task_type, "biz_id": task.biz_id, "id": task.id}


def record_business_key(conn: psycopg.Connection[Any], task: ClaimedTask) -> bool:
    """Take (task_type, biz_id) in the current transaction; False if it was taken already."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("record_business_key"), _key(task))
        return cur.fetchone() is not None


async def arecord_business_key(conn: psycopg.AsyncConnection[Any], task: ClaimedTask) -> bool:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("record_business_key"), _key(task))
        return await cur.fetchone() is not None


def _success(task: ClaimedTask, duplicate: bool) -> dict[str, Any]:
    outcome = "duplicate" if duplicate else "success"
    return {"id": task.id, "token": task.effective_id, "outcome": outcome}


def mark_success(conn: psycopg.Connection[Any], task: ClaimedTask, *, duplicate: bool) -> bool:
    with _sync_cursor(conn) as cur:
        cur.execute(query("mark_success"), _success(task, duplicate))
        return cur.fetchone() is not None


async def amark_success(
    conn: psycopg.AsyncConnection[Any], task: ClaimedTask, *, duplicate: bool
) -> bool:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("mark_success"), _success(task, duplicate))
        return await cur.fetchone() is not None


def _checkpoint(task: ClaimedTask, stage: str, data_json: str) -> dict[str, Any]:
    return {"id": task.id, "token": task.effective_id, "stage": stage, "data": data_json}


def save_checkpoint(
    conn: psycopg.Connection[Any], task: ClaimedTask, stage: str, data_json: str
) -> Any:
    """The new context, or None when the attempt's lease was lost."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("save_checkpoint"), _checkpoint(task, stage, data_json))
        row = cur.fetchone()
    return row["context"] if row else None


async def asave_checkpoint(
    conn: psycopg.AsyncConnection[Any], task: ClaimedTask, stage: str, data_json: str
) -> Any:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("save_checkpoint"), _checkpoint(task, stage, data_json))
        row = await cur.fetchone()
    return row["context"] if row else None


# --- task trees, reconciliation, schedules -----------------------------------------------------


def task_tree(conn: psycopg.Connection[Any], task_id: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("task_tree"), {"id": task_id})
        return cur.fetchall()


def tasks_without_task(
    conn: psycopg.Connection[Any], task_type: str, biz_ids: Sequence[str]
) -> list[str]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("tasks_without_task"), {"task_type": task_type, "biz_ids": list(biz_ids)})
        return [str(r["biz_id"]) for r in cur.fetchall()]


def schedule_upsert(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> Row:
    with _sync_cursor(conn) as cur:
        cur.execute(query("schedule_upsert"), params)
        row = cur.fetchone()
    assert row is not None
    return row


def schedule_tick(
    conn: psycopg.Connection[Any],
    *,
    name: str,
    tick: Any,
    outcome: str,
    task_id: int | None,
    reason: str | None,
) -> bool:
    with _sync_cursor(conn) as cur:
        cur.execute(
            query("schedule_tick"),
            {"name": name, "tick": tick, "outcome": outcome, "task_id": task_id, "reason": reason},
        )
        return cur.fetchone() is not None


def schedule_advance(conn: psycopg.Connection[Any], params: Mapping[str, Any]) -> None:
    conn.execute(query("schedule_advance"), params)


def list_schedules(conn: psycopg.Connection[Any]) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("list_schedules"))
        return cur.fetchall()


def schedule_missed_ticks(conn: psycopg.Connection[Any], name: str, limit: int) -> list[Row]:
    with _sync_cursor(conn) as cur:
        cur.execute(query("schedule_missed_ticks"), {"name": name, "limit": limit})
        return cur.fetchall()


def schedule_tick_task(
    conn: psycopg.Connection[Any], *, name: str, tick: Any, task_id: int
) -> None:
    conn.execute(query("schedule_tick_task"), {"name": name, "tick": tick, "task_id": task_id})


def demo_points(conn: psycopg.Connection[Any]) -> int:
    with _sync_cursor(conn) as cur:
        cur.execute(query("demo_points"))
        row = cur.fetchone()
    return int(row["points"]) if row else 0


def demo_pipeline(conn: psycopg.Connection[Any]) -> Row | None:
    with _sync_cursor(conn) as cur:
        cur.execute(query("demo_pipeline"))
        return cur.fetchone()


# --- control: pauses, breakers, protection, leadership -----------------------------------------


async def control_state(conn: psycopg.AsyncConnection[Any]) -> Row:
    return (await _aall(conn, "control_state"))[0]


def pause(
    conn: psycopg.Connection[Any], *, kind: str, name: str, actor: str, note: str | None
) -> bool:
    """True if it was not paused already."""
    found = _all(conn, "pause", {"kind": kind, "name": name, "actor": actor, "note": note})
    return bool(found)


def resume(
    conn: psycopg.Connection[Any], *, kind: str, name: str, actor: str, note: str | None
) -> bool:
    found = _all(conn, "resume", {"kind": kind, "name": name, "actor": actor, "note": note})
    return bool(found)


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
    conn: psycopg.AsyncConnection[Any], *, task_type: str, worker_id: str, probe_timeout: float
) -> bool:
    found = await _aall(
        conn,
        "breaker_take_probe",
        {"task_type": task_type, "worker_id": worker_id, "probe_timeout": probe_timeout},
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


# --- numbers for operators ---------------------------------------------------------------------


def backlog(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "backlog")


async def abacklog(conn: psycopg.AsyncConnection[Any]) -> list[Row]:
    return await _aall(conn, "backlog")


def window_outcomes(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_outcomes", {"minutes": minutes})


def window_latencies(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_latencies", {"minutes": minutes})


def window_retries(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "window_retries", {"minutes": minutes})


def dlq_growth(conn: psycopg.Connection[Any], minutes: int) -> list[Row]:
    return _all(conn, "dlq_growth", {"minutes": minutes})


def capacity(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "capacity")


def mean_run_seconds(
    conn: psycopg.Connection[Any], *, window_seconds: float, task_type: str | None
) -> list[Row]:
    return _all(conn, "mean_run_seconds", {"seconds": window_seconds, "task_type": task_type})


def db_health(conn: psycopg.Connection[Any]) -> Row | None:
    found = _all(conn, "db_health")
    return found[0] if found else None


async def adb_health(conn: psycopg.AsyncConnection[Any]) -> Row | None:
    found = await _aall(conn, "db_health")
    return found[0] if found else None


# --- retention ---------------------------------------------------------------------------------


def prune_batch(
    conn: psycopg.Connection[Any], *, dead_letters: bool, older_than_seconds: float, batch: int
) -> int:
    name = "prune_dead_letter_batch" if dead_letters else "prune_success_batch"
    return len(_all(conn, name, {"older_than": older_than_seconds, "batch": batch}))


def prune_stats(conn: psycopg.Connection[Any], *, older_than_seconds: float) -> None:
    conn.execute(query("prune_stats"), {"older_than": older_than_seconds})


# --- deployment: roles and health ---------------------------------------------------------------


def run_script(conn: psycopg.Connection[Any], script: LiteralString) -> None:
    """Run a multi-statement script of our own (``sql/roles.sql``) in one transaction."""
    with conn.transaction():
        conn.execute(script)


def worker_health(
    conn: psycopg.Connection[Any], *, worker_id: str | None, host: str | None, pid: int | None
) -> Row | None:
    """The freshest worker row matching the given filters (None: unfiltered)."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("worker_health"), {"id": worker_id, "host": host, "pid": pid})
        return cur.fetchone()


# --- the operator's web page (taskq dashboard) ---------------------------------------------------


def dlq_search(
    conn: psycopg.Connection[Any],
    *,
    task_type: str | None,
    error: str | None,
    older_than_seconds: float | None,
    newer_than_seconds: float | None,
    limit: int,
) -> list[Row]:
    return _all(
        conn,
        "dlq_search",
        {
            "task_type": task_type,
            "error": error,
            "older_than": older_than_seconds,
            "newer_than": newer_than_seconds,
            "limit": limit,
        },
    )


def dlq_requeue_edited(
    conn: psycopg.Connection[Any],
    *,
    task_id: int,
    payload_json: str,
    reset: bool,
    actor: str,
    note: str | None,
) -> bool:
    """False when the task is not (or no longer) a dead letter: nothing changed."""
    params = {
        "id": task_id,
        "payload": payload_json,
        "reset": reset,
        "actor": actor,
        "note": note,
    }
    try:
        return bool(_all(conn, "dlq_requeue_edited", params))
    except psycopg.errors.UniqueViolation as exc:
        detail = exc.diag.message_detail or ""
        raise InvalidTask(
            f"cannot requeue, nothing changed: a live task holds the same unique key. {detail}"
        ) from None
    except psycopg.DataError as exc:  # SQLSTATE class 22, e.g. a \u0000 that jsonb cannot hold
        raise InvalidTask(
            f"the payload was refused, nothing changed: {exc.diag.message_primary}"
        ) from None


def audit_list(
    conn: psycopg.Connection[Any],
    *,
    action: str | None,
    task_id: int | None,
    task_type: str | None,
    limit: int,
) -> list[Row]:
    params = {"action": action, "task_id": task_id, "task_type": task_type, "limit": limit}
    return _all(conn, "audit_list", params)


async def aget_task(conn: psycopg.AsyncConnection[Any], task_id: int) -> Row | None:
    found = await _aall(conn, "get_task", {"id": task_id})
    return found[0] if found else None
