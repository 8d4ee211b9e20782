"""Every named query in sql/queries runs, with plausible parameters, inside a transaction that is
rolled back; the statements that must stay cheap keep their plan shape.

A new ``-- name:`` block fails ``test_every_named_query_runs`` until its placeholders have a
plausible value in ``PARAMS`` below (by placeholder name, shared by all queries).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from taskq.db.sqlfiles import query, query_names
from taskq.db.store import enqueue as enqueue_store
from tests import factories
from tests.support import nested_plans

TOKEN = uuid.uuid4()
NOW = dt.datetime.now(dt.UTC)

# One plausible value per placeholder name, whatever the query.
PARAMS: dict[str, Any] = {
    # ids, tokens, batches
    "id": 1,
    "ids": [1, 2],
    "task_id": 1,
    "token": TOKEN,
    "tokens": [TOKEN, uuid.uuid4()],
    "limit": 10,
    "batch": 100,
    "n": 3,
    # names
    "task_type": "t",
    "task_types": ["t"],
    "queue": "default",
    "queues": Jsonb({"default": 10}),
    "name": "nightly",
    "kind": "task_type",
    "worker_id": "w1",
    "host": "h",
    "pid": 1,
    "version": "0",
    "actor": "tester",
    "note": "why",
    "reason": "why",
    "action": "dlq_requeue_run",
    "biz_id": "b1",
    "biz_ids": ["b1", "b2"],
    # enqueue
    "payload": Jsonb({"a": 1}),
    "priority": 0,
    "delay": 0.0,
    "scheduled_at": None,
    "max_retry_count": 5,
    "timeout_seconds": 60,
    "trace_id": "trace",
    "unique_key": None,
    "ordering_key": None,
    "parent_id": None,
    "payloads": [Jsonb({})],
    "priorities": [0],
    "delays": [0.0],
    "scheduled_ats": [None],
    "max_retry_counts": [5],
    "timeouts": [60],
    "trace_ids": ["trace"],
    "unique_keys": [None],
    "ordering_keys": [None],
    "parent_ids": [None],
    "concurrency_key": None,
    "concurrency_keys": [None],
    # flow limits
    "max_running": 3,
    "max_running_per_key": None,
    "rate_text": "1/s",
    "burst": 1.0,
    "fair": None,
    "clear": [],
    "retry_share": 0.5,
    "traceparent": None,
    "traceparents": [None],
    # claim and finish
    "retries_only": False,
    "probe": False,
    "isolated": False,
    "error": "boom",
    "errors": ["boom", "boom"],
    "after": None,
    "afters": [None, 30.0],
    "jitters": [0.0, 0.0],
    "counts": [True, False],
    "breaker": True,
    "threshold": 5,
    "jitter": 0.0,
    "outcome": "success",
    "progress": Jsonb({"done": 1}),
    "data": Jsonb({}),
    "stage": "s1",
    # maintenance
    "grace": 10.0,
    "orphan_after": 30.0,
    "crash_limit": 3,
    "lease_seconds": 30.0,
    "older_than": 3600.0,
    "newer_than": None,
    "ttl": 30.0,
    "cooldown": 30.0,
    "probe_timeout": 300.0,
    "empty_wait": 5.0,
    "window": 300.0,
    "rate": 0.5,
    "min_volume": 20,
    "level": 1,
    "force": False,
    "reset": False,
    "minutes": 15,
    "seconds": 3600.0,
    # the dashboard's panel
    "status": "PENDING",
    "before_id": None,
    "min_id": 0,
    "max_age_seconds": 3600.0,
    "rss": 1 << 20,
    # schedules
    "spec": "every 1h",
    "timezone": "UTC",
    "catch_up": "skip",
    "backfill_limit": 10,
    "tick": NOW,
    "last_tick": NOW,
    "next_tick": NOW,
    "last_task_id": None,
    "missed": 0,
    # task control
    "with_children": False,
    "by": "tester",
    "enabled": False,
    "fingerprint": None,
    "state": None,
    "owner": None,
    "resolution": None,
    "since": 3600.0,
    "detail": Jsonb({}),
    # taskq.testing
    "retries": True,
}

# Placeholders whose value depends on the query (the same name, another type).
OVERRIDES: dict[str, dict[str, Any]] = {
    "insert_tasks": {"queues": ["default"], "task_types": ["t"], "biz_ids": [None]},
    "find_live_tasks": {"unique_keys": ["k"]},
    "dlq_search": {"error": None, "older_than": None},
    "dlq_requeue_edited": {"payload": Jsonb({"edited": True})},
    "audit_list": {"action": None, "task_id": None, "task_type": None},
    "schedule_tick": {"outcome": "enqueued", "reason": None},
    "prune_stats": {"older_than": 3600.0},
    "worker_heartbeat": {"ids": [], "tokens": [], "id": "w1", "stopped": None},
    "dlq_list": {"task_type": None},
    "running_tasks": {"task_type": None},
    "breaker_reset": {"task_type": None},
    "worker_unregister": {"id": "w1"},
    "worker_health": {"id": "w1"},
    "limits_declare": {
        "max_running": [3],
        "per_key": [None],
        "rates": [1.0],
        "rate_texts": ["1/s"],
        "bursts": [1.0],
        "fair": [False],
    },
    "report_memory": {"id": "w1"},
    "isolated_due": {"queues": ["default"]},
    "sample_backlog": {
        "queues": ["default"],
        "runnable": [3],
        "scheduled": [0],
        "retry_waiting": [1],
        "processing": [2],
    },
    # All or nothing: ids that are not (cancellable / dead letters) refuse the whole call.
    "cancel_tasks": {"ids": []},
    "dlq_handle": {"ids": [], "state": "investigating"},
    "register_task_types": {
        "queues": ["default"],
        "max_retry_counts": [5],
        "timeouts": [60],
        "reconciled": [False],
    },
    "blocked_ordering_keys": {"min_wait_seconds": 60.0},
    "drain_pending": {"ids": None},
    "drain_outcomes": {"since": NOW},
    "mark_failed_many": {"delays": [1.0, 1.0]},
}

# Statements that act only for the attempt the caller holds (its id is known at run time).
HELD = {"record_business_key"}

# Statements that cannot run through a plain execute().
COPY = {"copy_tasks"}

# Statements that end the bulk enqueue's savepoint: they run after enqueue_savepoint.
SAVEPOINT_ENDS = {"enqueue_savepoint_release", "enqueue_savepoint_rollback"}

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def params_for(name: str) -> dict[str, Any]:
    wanted = set(_PLACEHOLDER.findall(query(name)))
    missing = wanted - PARAMS.keys() - OVERRIDES.get(name, {}).keys()
    assert not missing, f"query {name}: add a plausible value for {sorted(missing)} to PARAMS"
    values = {k: PARAMS[k] for k in wanted if k in PARAMS}
    values.update({k: v for k, v in OVERRIDES.get(name, {}).items() if k in wanted})
    return values


@pytest.fixture(scope="module")
def db(admin_dsn: str, template_db: str) -> Iterator[str]:
    """One database for the whole module: every test rolls its transaction back."""
    from tests.conftest import fresh_database

    with fresh_database(admin_dsn, template_db) as value:
        yield value


@pytest.fixture
def tx(db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db) as conn:
        # A few rows in the states the queries look for, so they have something to touch.
        factories.task(conn, status="PENDING", biz_id="b1")
        factories.task(
            conn, status="PROCESSING", age=60, effective_id=TOKEN, worker_id="w1", biz_id="b2"
        )
        factories.task(conn, status="DEAD_LETTER", finished_ago=10, last_error="boom")
        factories.task(conn, status="SUCCESS", finished_ago=7200)
        factories.worker(conn, "w1")
        yield conn
        conn.rollback()


@pytest.mark.parametrize("name", sorted(query_names()))
def test_every_named_query_runs(tx: psycopg.Connection[Any], name: str) -> None:
    with tx.cursor() as cur:
        if name in COPY:
            every = [*enqueue_store._COPY_OPTIONAL, "scheduled_at"]
            with cur.copy(enqueue_store.copy_statement(every)):
                pass  # no rows: the statement and its columns are what is checked
            return
        params = params_for(name)
        if name in SAVEPOINT_ENDS:
            cur.execute(query("enqueue_savepoint"))
        if name in HELD:
            # The attempt the worker holds: the running task with TOKEN.
            held = tx.execute("SELECT id FROM taskq.tasks WHERE effective_id = %s", [TOKEN])
            params["id"] = held.fetchone()[0]  # type: ignore[index]
        cur.execute(query(name), params)
        if cur.description is not None:
            cur.fetchall()


def _plan(conn: psycopg.Connection[Any], name: str, **extra: Any) -> str:
    params = {**params_for(name), **extra}
    rows = conn.execute(f"EXPLAIN {query(name)}", params).fetchall()  # type: ignore[arg-type]
    return "\n".join(str(r[0]) for r in rows)


@pytest.fixture
def history(tx: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A table whose history dwarfs its backlog, with fresh statistics."""
    tx.execute(
        "INSERT INTO taskq.tasks (task_type, status, finished_at, started_at)"
        " SELECT 't', 'SUCCESS', now(), now() FROM generate_series(1, 20000)"
    )
    factories.tasks(tx, 20, status="PENDING")
    tx.execute("ANALYZE taskq.tasks")
    return tx


@pytest.mark.parametrize("name", ["claim_batch", "claim_few"])
def test_the_claim_scans_the_runnable_index_by_type(
    history: psycopg.Connection[Any], name: str
) -> None:
    # The claim is a function (taskq.claim_batch_v3, claim_few_v1): read the plans of what it
    # runs inside.
    plans = nested_plans(history, query(name), params_for(name))
    assert "tasks_runnable_by_type_idx" in json.dumps(plans), plans

    def seq_scans_of_tasks(node: dict[str, Any]) -> int:
        here = node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == "tasks"
        return int(here) + sum(seq_scans_of_tasks(n) for n in node.get("Plans", []))

    assert not sum(seq_scans_of_tasks(p["Plan"]) for p in plans), plans


@pytest.mark.parametrize(
    "name",
    [
        "mark_success_many",
        "mark_failed_many",
        "mark_dead_many",
        "mark_cancelled_many",
        "release_many",
    ],
)
def test_finishing_an_attempt_goes_through_the_primary_key(
    history: psycopg.Connection[Any], name: str
) -> None:
    plan = _plan(history, name)
    assert "tasks_pkey" in plan, plan
    assert "tasks_processing_idx" not in plan and "Seq Scan on tasks" not in plan, plan


def test_pruning_uses_the_finished_index(history: psycopg.Connection[Any]) -> None:
    # Pruning is a function (taskq.prune_batch_v1): read the plans of what it runs inside.
    plans = nested_plans(history, query("prune_success_batch"), params_for("prune_success_batch"))
    assert "tasks_finished_idx" in json.dumps(plans), plans
