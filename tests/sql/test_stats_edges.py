"""`taskq stats` names blocked ordering keys, and keys retries and dead-letter growth by
(queue, task type)."""

from __future__ import annotations

import psycopg

from taskq.ops import stats
from taskq.ops.formatting import blocked_reason


def _insert(conn: psycopg.Connection, columns: str, values: str) -> int:
    row = conn.execute(
        f"INSERT INTO taskq.tasks ({columns}) VALUES ({values}) RETURNING id"  # test data only
    ).fetchone()
    assert row
    return int(row[0])


def test_a_head_nobody_runs_is_reported_as_blocking_its_key(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        head = _insert(
            conn,
            "task_type, queue, ordering_key, scheduled_at",
            "'nobody.runs', 'default', 'acct-1', now() - interval '5 minutes'",
        )
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'acct-1'")
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'acct-1'")
        # Not blocked: a lone key, a key whose head runs, a head that only just became due.
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'alone'")
        _insert(
            conn,
            "task_type, queue, ordering_key, status, started_at",
            "'sms.notify', 'sms', 'busy', 'PROCESSING', now()",
        )
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'busy'")
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'fresh'")
        _insert(conn, "task_type, queue, ordering_key", "'sms.notify', 'sms', 'fresh'")
    report = stats.report(dsn)
    [key] = report.blocked_keys
    assert (key["ordering_key"], key["head_id"], key["waiting"]) == ("acct-1", head, 2)
    assert key["unregistered"] and key["unserved"] and key["head_waiting_seconds"] >= 290
    assert blocked_reason(key) == "no worker has registered this type"
    assert report.as_dict()["blocked_keys"][0]["ordering_key"] == "acct-1"


def test_retries_and_dead_letter_growth_are_per_queue_and_type(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue, retries in (("a", 0), ("b", 2), ("b", 2)):
            _insert(
                conn,
                "task_type, queue, status, retry_count, started_at, finished_at",
                f"'sms.notify', '{queue}', 'SUCCESS', {retries}, now(), now()",
            )
        conn.execute(
            "INSERT INTO taskq.task_stats (bucket, queue, task_type, outcome, n) "
            "VALUES (date_trunc('minute', now()), 'a', 'sms.notify', 'dead_lettered', 3)"
        )
    rows = {t.queue: t for t in stats.report(dsn).types}
    assert rows["a"].retries == {0: 1} and rows["a"].dead_letter_growth == 3
    assert rows["b"].retries == {2: 2} and rows["b"].dead_letter_growth == 0
