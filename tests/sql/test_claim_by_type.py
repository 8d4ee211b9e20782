"""A claim reads only the rows of the types it may take (sql/ddl/0023_claim_by_type.sql): a
backlog of another type in the same queue (a type it does not run, a paused one, one whose
breaker is open) costs it nothing, and across the types it does take the claim order holds and
no more rows are locked than are claimed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from taskq.db.sqlfiles import query
from tests import factories
from tests.support import nested_plans

BACKLOG = 3000


def _params(task_types: list[str], limit: int) -> dict[str, Any]:
    return {
        "queue": "default",
        "task_types": task_types,
        "max_retry_counts": [5] * len(task_types),
        "timeouts": [60] * len(task_types),
        "limit": limit,
        "worker_id": "w",
        "retries_only": False,
        "probe": False,
        "isolated": False,
    }


def _rows_read(plans: list[dict[str, Any]]) -> int:
    """Rows of taskq.tasks the claim's statements read: returned or filtered out by a scan."""

    def walk(node: dict[str, Any]) -> int:
        here = 0
        if node.get("Relation Name") == "tasks" and "Scan" in node.get("Node Type", ""):
            loops = node.get("Actual Loops", 1)
            here = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
        return here + sum(walk(child) for child in node.get("Plans", []))

    return sum(walk(p["Plan"]) for p in plans)


@pytest.fixture
def backlog(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """BACKLOG due rows of 'stuck', older than (so in claim order before) 20 rows of 'ok'."""
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, scheduled_at)"
        " SELECT 'stuck', now() - interval '1 hour' FROM generate_series(1, %s)",
        (BACKLOG,),
    )
    factories.tasks(conn, 20, task_type="ok")
    conn.execute("ANALYZE taskq.tasks")
    return conn


@pytest.mark.parametrize(
    ("task_types", "open_breaker", "expected"),
    [
        (["ok"], False, [("ok", 10)]),  # 'stuck' is a type this worker does not run
        (["stuck", "ok"], True, [("ok", 10)]),  # its breaker is open
        (["stuck"], True, []),  # alone: no look first, the scan itself leaves it
    ],
)
def test_another_types_backlog_is_not_read(
    backlog: psycopg.Connection[Any],
    task_types: list[str],
    open_breaker: bool,
    expected: list[tuple[str, int]],
) -> None:
    """Before 0023 each lane scan walked the queue in claim order and dropped the other type's
    rows one by one: these claims read all BACKLOG of them (100,000 made one 15-30x slower)."""
    if open_breaker:
        backlog.execute("INSERT INTO taskq.breakers (task_type, state) VALUES ('stuck', 'OPEN')")
    plans = nested_plans(backlog, query("claim_batch"), _params(task_types, 10))
    claimed = backlog.execute(
        "SELECT task_type, count(*) FROM taskq.tasks WHERE status = 'PROCESSING' GROUP BY 1"
    ).fetchall()
    assert claimed == expected
    assert _rows_read(plans) < 100, plans


def test_the_breakers_probe_still_takes_the_open_types_rows(
    backlog: psycopg.Connection[Any],
) -> None:
    backlog.execute("INSERT INTO taskq.breakers (task_type, state) VALUES ('stuck', 'HALF_OPEN')")
    rows = backlog.execute(
        query("claim_batch"), {**_params(["stuck"], 1), "probe": True}
    ).fetchall()
    assert [r[1] for r in rows if r[0] is not None] == ["stuck"]


def _descents(plans: list[dict[str, Any]]) -> int:
    """Descents into the runnable index: every loop of every scan of it."""

    def walk(node: dict[str, Any]) -> int:
        here = 0
        if node.get("Index Name") == "tasks_runnable_by_type_idx":
            here = node.get("Actual Loops", 1)
        return here + sum(walk(child) for child in node.get("Plans", []))

    return sum(walk(p["Plan"]) for p in plans)


def test_a_worker_of_many_types_looks_only_at_the_types_that_have_rows(
    conn: psycopg.Connection[Any],
) -> None:
    """40 types registered, one with work: 0023-0024 looked into the index once per type and
    lane (80 descents, most finding nothing); sql/ddl/0025 asks first which types have rows."""
    factories.tasks(conn, 20, task_type="ok")
    types = [f"idle{i:02d}" for i in range(39)] + ["ok"]
    plans = nested_plans(conn, query("claim_batch"), _params(types, 10))
    claimed = conn.execute(
        "SELECT task_type, count(*) FROM taskq.tasks WHERE status = 'PROCESSING' GROUP BY 1"
    ).fetchall()
    assert claimed == [("ok", 10)]
    assert _descents(plans) < 10, _descents(plans)


@pytest.mark.parametrize(
    ("limit", "idle_types", "other_types"),
    [
        (5, 0, 0),
        (8, 0, 0),
        (8, 10, 0),  # 12 types run, 2 with rows: the lanes look at those two only
        (8, 3, 8),  # more types with rows (10) than run (5): the look for them stops short
    ],
)
def test_across_types_the_claim_order_holds_and_only_claimed_rows_are_locked(
    dsn: str, limit: int, idle_types: int, other_types: int
) -> None:
    """Two due types interleaved by priority and age: the claim takes the first `limit` in
    claim order whichever type they are, and a second claimer sees every other row unlocked.
    Six rows have priority 1: the first eight need 'a''s priority-0 rows too (the scan of a
    type's lower priorities after its first one). Also with types the worker runs that have
    no rows, and with rows of types it does not run, older than all of them."""
    for i in range(other_types):
        factories.task(dsn, task_type=f"other{i}", age=5000, priority=1)
    for i in range(40):
        task_type = "b" if i % 3 == 0 else "a"
        factories.task(dsn, task_type=task_type, age=1000 - i, priority=1 if i % 7 == 0 else 0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = conn.execute(
            "SELECT id, task_type FROM taskq.tasks WHERE task_type IN ('a', 'b')"
            " ORDER BY priority DESC, runnable_at, id LIMIT %s",
            (limit,),
        ).fetchall()
    assert {t for _, t in first} == {"a", "b"}  # the first ones mix the two types
    expected = [i for i, _ in first]
    types = ["a", "b"] + [f"idle{i}" for i in range(idle_types)]
    with psycopg.connect(dsn) as claimer, psycopg.connect(dsn) as other:
        rows = claimer.execute(query("claim_batch"), _params(types, limit)).fetchall()
        assert sorted(r[0] for r in rows if r[0] is not None) == sorted(expected)
        unlocked = other.execute(
            "SELECT id FROM taskq.tasks WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED"
        ).fetchall()
        assert len(unlocked) == 40 + other_types - limit
        other.rollback()
        claimer.rollback()
