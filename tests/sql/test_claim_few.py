"""The claim after a short round (taskq.claim_few_v1, sql/ddl/0031) claims exactly what
taskq.claim_batch_v3 claims: the few runnable rows in one scan when they fit in the batch,
claim_batch_v3's own answer otherwise (more rows than the limit, flow limits on a type)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from taskq.db.sqlfiles import query
from tests import factories

PARAMS = {
    "queue": "default",
    "task_types": ["t", "u"],
    "max_retry_counts": [5, 7],
    "timeouts": [60, 90],
    "limit": 10,
    "worker_id": "w",
    "retries_only": False,
    "probe": False,
    "isolated": False,
}


def claimed(conn: psycopg.Connection[Any], name: str, **params: Any) -> list[dict[str, Any]]:
    """The rows claim ``name`` returns, claimed in a transaction that is then rolled back, so
    both claims can be asked the same question."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(query(name), {**PARAMS, **params}).fetchall()
    conn.rollback()
    return sorted((r for r in rows if r["id"] is not None), key=lambda r: r["id"])


def both(conn: psycopg.Connection[Any], **params: Any) -> list[int]:
    """The ids both claims take; they must take the same ones."""
    few = [r["id"] for r in claimed(conn, "claim_few", **params)]
    batch = [r["id"] for r in claimed(conn, "claim_batch", **params)]
    assert few == batch
    return few


def test_a_few_runnable_rows_are_claimed_as_the_full_claim_claims_them(dsn: str) -> None:
    """Every row the full claim leaves out, the short one leaves out too."""
    with psycopg.connect(dsn) as conn:
        runnable = [
            factories.task(conn, task_type="t"),
            factories.task(conn, task_type="u", priority=5),
            factories.task(conn, task_type="t", status="FAILED"),
            factories.task(conn, task_type="t", ordering_key="k"),
        ]
        factories.task(conn, task_type="t", ordering_key="k")  # waits for the one before
        factories.task(conn, task_type="t", age=-60)  # scheduled in a minute
        factories.task(conn, task_type="t", status="FAILED", retry_in=60)  # retries later
        factories.task(conn, task_type="t", isolate=True)  # the isolator's, alone
        factories.task(conn, task_type="v")  # a type this worker does not run
        factories.task(conn, task_type="t", queue="other")
        factories.task(conn, task_type="t", status="PROCESSING")
        conn.commit()
        assert both(conn) == runnable
        assert both(conn, retries_only=True) == [runnable[2]]
        conn.execute(
            "INSERT INTO taskq.breakers (task_type, state, opened_at) VALUES ('u', 'OPEN', now())"
        )
        conn.commit()
        assert both(conn) == [runnable[0], *runnable[2:]]


def test_the_rows_come_back_as_the_full_claim_returns_them(dsn: str) -> None:
    """Status, token, worker and the handler's settings written; ready_at the row's
    runnable time before the claim; capped false and no held_for without limits."""
    with psycopg.connect(dsn) as conn:
        fresh = factories.task(conn, task_type="t", age=10)
        retry = factories.task(conn, task_type="u", status="FAILED", max_retry_count=None)
        before = dict(conn.execute("SELECT id, runnable_at FROM taskq.tasks").fetchall())
        conn.commit()
        rows = {r["id"]: r for r in claimed(conn, "claim_few")}
        full = {r["id"]: r for r in claimed(conn, "claim_batch")}
    assert rows.keys() == full.keys() == {fresh, retry}
    for task_id, row in rows.items():
        assert row["ready_at"] == before[task_id]
        assert row["capped"] is False and row["held_for"] is None
        assert row["started_at"] is not None
        assert row["effective_id"] != full[task_id]["effective_id"]  # a new token per claim
        assert str(row["effective_id"]).endswith(f"{task_id:012x}")
        same = ("task_type", "retry_count", "max_retry_count", "timeout_seconds", "payload")
        assert {k: row[k] for k in same} == {k: full[task_id][k] for k in same}
    assert rows[fresh]["timeout_seconds"] == 60  # the handler's, for a row that left it NULL
    assert rows[retry]["max_retry_count"] == 7
    with psycopg.connect(dsn) as conn:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query("claim_few"), PARAMS)
        states = conn.execute(
            "SELECT status, worker_id, count(*) FROM taskq.tasks GROUP BY 1, 2"
        ).fetchall()
    assert states == [("PROCESSING", "w", 2)]


def test_more_rows_than_the_batch_take_the_full_claims_lanes(dsn: str) -> None:
    """Four retries due and four fresh rows, a batch of four: half of it for the retry lane
    (queue_limits' default share), as the full claim takes them, not the first four of one
    scan."""
    with psycopg.connect(dsn) as conn:
        retries = factories.tasks(conn, 4, task_type="t", status="FAILED")
        fresh = factories.tasks(conn, 4, task_type="t")
        conn.commit()
        ids = both(conn, limit=4)
    assert len(set(ids) & set(retries)) == 2 and len(set(ids) & set(fresh)) == 2


def test_flow_limits_are_the_full_claims_to_apply(dsn: str) -> None:
    """A cap of one running task of the type: one row of three, marked capped."""
    with psycopg.connect(dsn) as conn:
        factories.tasks(conn, 3, task_type="t")
        conn.execute("INSERT INTO taskq.flow_limits (task_type, max_running) VALUES ('t', 1)")
        conn.commit()
        rows = claimed(conn, "claim_few")
        assert len(rows) == 1 and rows[0]["capped"] is True
        assert both(conn) == [rows[0]["id"]]


def test_rows_another_claim_holds_are_skipped(dsn: str) -> None:
    with psycopg.connect(dsn) as conn, psycopg.connect(dsn) as other:
        first, second = factories.tasks(conn, 2, task_type="t")
        conn.commit()
        other.execute("SELECT 1 FROM taskq.tasks WHERE id = %s FOR UPDATE", (first,))
        assert both(conn) == [second]
        other.rollback()
        assert both(conn) == [first, second]
