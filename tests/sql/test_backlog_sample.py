"""The leader's per-minute backlog sample is the backlog gauge's rows summed per queue: the
same counts a separate read of the live rows gave, without that second read."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db import store
from tests import factories

# The sample's own read of the live rows, as it was before it reused the gauge's: the reference.
_REFERENCE = """
SELECT queue,
       count(*) FILTER (WHERE status IN ('PENDING', 'FAILED') AND runnable_at <= now()),
       count(*) FILTER (WHERE status = 'PENDING' AND runnable_at > now()),
       count(*) FILTER (WHERE status = 'FAILED' AND runnable_at > now()),
       count(*) FILTER (WHERE status = 'PROCESSING')
FROM taskq.tasks
WHERE status IN ('PENDING', 'FAILED') OR status = 'PROCESSING'
GROUP BY queue ORDER BY queue
"""
_SAMPLES = """
SELECT queue, runnable, scheduled, retry_waiting, processing
FROM taskq.backlog_samples WHERE bucket = date_trunc('minute', now()) ORDER BY queue
"""


async def test_the_sample_sums_the_gauges_rows_per_queue(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    factories.tasks(conn, 3, task_type="a", queue="q1")
    factories.tasks(conn, 2, task_type="b", queue="q1", age=-600)  # due in 10 minutes
    factories.tasks(conn, 2, task_type="b", queue="q1", status="PROCESSING")
    factories.task(conn, task_type="a", queue="q2", status="FAILED", retry_in=300)
    factories.task(conn, task_type="c", queue="q2", status="FAILED")
    factories.task(conn, task_type="c", queue="q2", status="SUCCESS")
    factories.task(conn, task_type="d", queue="only_dead", status="DEAD_LETTER")
    backlog = store.backlog(conn)
    assert {r["queue"] for r in backlog} == {"q1", "q2", "only_dead"}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        await store.sample_backlog(aconn, backlog)
        # Upserted within the minute: the latest sample wins.
        factories.task(conn, task_type="a", queue="q2")
        await store.sample_backlog(aconn, store.backlog(conn))
    expected = [tuple(r) for r in conn.execute(_REFERENCE).fetchall()]
    assert expected == [("q1", 3, 2, 0, 2), ("q2", 2, 0, 1, 0)]
    assert [tuple(r) for r in conn.execute(_SAMPLES).fetchall()] == expected


async def test_no_live_rows_write_no_sample(dsn: str, conn: psycopg.Connection[Any]) -> None:
    factories.task(conn, task_type="d", queue="only_dead", status="DEAD_LETTER")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        await store.sample_backlog(aconn, store.backlog(conn))
    assert conn.execute("SELECT count(*) FROM taskq.backlog_samples").fetchone() == (0,)
