"""taskq.count_outcome_v1: every statement that ends attempts counts them in task_stats, once."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from taskq.db import store
from taskq.model import ClaimedTask
from taskq.worker.completer import commit_success, reap
from tests import factories


def _stats(conn: psycopg.Connection[Any]) -> dict[tuple[str, str, str], tuple[int, float]]:
    rows = conn.execute(
        "SELECT queue, task_type, outcome, sum(n)::bigint, sum(run_seconds)"
        " FROM taskq.task_stats GROUP BY 1, 2, 3"
    ).fetchall()
    return {(q, t, o): (int(n), float(s)) for q, t, o, n, s in rows}


def _token(conn: psycopg.Connection[Any], task_id: int) -> uuid.UUID:
    row = conn.execute("SELECT effective_id FROM taskq.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


async def test_success_failure_dead_and_reap_are_counted(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    ok = factories.tasks(conn, 3, task_type="a", status="PROCESSING", age=10)
    ok_b = factories.task(conn, task_type="b", queue="q2", status="PROCESSING", age=4)
    failing = factories.task(conn, task_type="a", status="PROCESSING", age=2)
    snoozed = factories.task(conn, task_type="a", status="PROCESSING", age=2)
    exhausted = factories.task(
        conn, task_type="a", status="PROCESSING", age=2, retry_count=1, max_retry_count=1
    )
    permanent = factories.task(conn, task_type="c", status="PROCESSING", age=2)
    # Three dead workers that each ran one attempt alone: each rescue is charged (an attempt
    # that died beside others is released uncharged, and not counted).
    stale = [factories.worker(conn, f"gone{i}", heartbeat_ago=120, lease_seconds=10) for i in "123"]
    for worker_id in stale[:2]:
        factories.task(conn, task_type="d", status="PROCESSING", age=100, worker_id=worker_id)
    factories.task(
        conn, task_type="d", status="PROCESSING", age=100, worker_id=stale[2], max_retry_count=0
    )

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        ids = [*ok, ok_b]
        done = await store.mark_success_many(aconn, ids, [_token(conn, i) for i in ids])
        assert done == set(ids)
        # A second, late completion of the same attempts is not counted again.
        assert await store.mark_success_many(aconn, ids, [_token(conn, i) for i in ids]) == set()
        failures = (failing, snoozed, exhausted)
        failed = await store.mark_failed_many(
            aconn,
            ids=failures,
            tokens=[_token(conn, i) for i in failures],
            errors=["boom"] * 3,
            after_seconds=[None] * 3,
            delay_seconds=[1.0] * 3,
            jitter_seconds=[0.0] * 3,
            counts_for_breaker=[True, False, True],
            breaker_threshold=5,
        )
        assert set(failed) == set(failures)
        assert await store.mark_dead_many(
            aconn, ids=[permanent], tokens=[_token(conn, permanent)], errors=["bad"]
        )
        reaped = await reap(aconn, grace_seconds=30, orphan_after_seconds=60)
        assert reaped is not None and len(reaped[0]) == 3

    stats = _stats(conn)
    counts = {key: n for key, (n, _) in stats.items()}
    assert counts == {
        ("default", "a", "success"): 3,
        ("q2", "b", "success"): 1,
        ("default", "a", "failed"): 1,
        ("default", "a", "retried"): 1,
        ("default", "a", "dead_lettered"): 1,
        ("default", "c", "permanent"): 1,  # taskq.Permanent: its own outcome
        ("default", "d", "rescued"): 2,
        ("default", "d", "dead_lettered"): 1,
    }
    # Run time is the attempts' own: three attempts of about 10 s each, one of about 4 s.
    assert 29 < stats[("default", "a", "success")][1] < 40
    assert 3.5 < stats[("q2", "b", "success")][1] < 10
    assert stats[("default", "d", "rescued")][1] == 0.0


def test_the_idempotent_commit_counts_success_or_duplicate(
    conn: psycopg.Connection[Any],
) -> None:
    first = factories.task(conn, task_type="idem", status="PROCESSING", age=1, biz_id="k")
    second = factories.task(conn, task_type="idem", status="PROCESSING", age=1, biz_id="k")
    for task_id, duplicate in ((first, False), (second, True)):
        claimed = ClaimedTask.__new__(ClaimedTask)
        claimed.id, claimed.effective_id = task_id, _token(conn, task_id)
        with conn.transaction():
            assert commit_success(conn, claimed, duplicate=duplicate)
    counts = {key: n for key, (n, _) in _stats(conn).items()}
    assert counts == {("default", "idem", "success"): 1, ("default", "idem", "duplicate"): 1}


def test_counts_add_up_within_a_minute(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT taskq.count_outcome_v1('q', 't', 'success', 2, 1.5)")
    conn.execute("SELECT taskq.count_outcome_v1('q', 't', 'success', 3, NULL)")
    conn.execute("SELECT taskq.count_outcome_v1('q', 't', 'rescued', 1)")
    assert _stats(conn) == {("q", "t", "success"): (5, 1.5), ("q", "t", "rescued"): (1, 0.0)}
