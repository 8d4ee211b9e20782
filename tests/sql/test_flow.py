"""Flow control in SQL: caps, rates, per-key caps, fair share and the retry lane, as the claim
function (taskq.claim_batch_v3) applies them."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from taskq.db.sqlfiles import query


def claim(conn: psycopg.Connection[Any], types: list[str], limit: int) -> list[tuple[Any, ...]]:
    """Rows (id, task_type, concurrency_key, retry_count, held_for) of one claim."""
    return conn.execute(
        "SELECT c.id, t.task_type, t.concurrency_key, t.retry_count, c.held_for"
        " FROM (" + query("claim_batch").rstrip().rstrip(";") + ") AS c"
        " LEFT JOIN taskq.tasks AS t ON t.id = c.id",
        {
            "queue": "default",
            "task_types": types,
            "max_retry_counts": [5] * len(types),
            "timeouts": [60] * len(types),
            "limit": limit,
            "worker_id": "w",
            "retries_only": False,
            "probe": False,
            "isolated": False,
        },
    ).fetchall()


def claimed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [r for r in rows if r[0] is not None]


def held_for(rows: list[tuple[Any, ...]]) -> float | None:
    hints = [r[4] for r in rows if r[0] is None]
    return hints[0] if hints else None


def add(conn: psycopg.Connection[Any], task_type: str, n: int, key: str | None = None) -> None:
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, concurrency_key)"
        " SELECT %s, %s FROM generate_series(1, %s)",
        (task_type, key, n),
    )


def limit(conn: psycopg.Connection[Any], task_type: str, **settings: Any) -> None:
    args = ", ".join(f"p_{name} => %({name})s" for name in settings)
    conn.execute(
        f"SELECT * FROM taskq.limits_set_v1(%(t)s, 'test', {args})",  # type: ignore[arg-type]
        {"t": task_type, **settings},
    )


def test_no_limits_claims_as_before(conn: psycopg.Connection[Any]) -> None:
    add(conn, "a", 20)
    rows = claim(conn, ["a"], 8)
    assert len(claimed(rows)) == 8 and held_for(rows) is None
    assert all(r[4] is None for r in rows)


def test_running_cap_counts_what_runs(conn: psycopg.Connection[Any]) -> None:
    add(conn, "capped", 10)
    add(conn, "free", 10)
    limit(conn, "capped", max_running=2)
    first = claimed(claim(conn, ["capped", "free"], 8))
    assert sum(r[1] == "capped" for r in first) == 2
    assert sum(r[1] == "free" for r in first) == 6, "other types fill the rest of the claim"
    assert not [r for r in claimed(claim(conn, ["capped"], 8))], "the cap is full"
    conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE id = %s", (first[0][0],))
    assert len(claimed(claim(conn, ["capped"], 8))) == 1, "a finished attempt frees its slot"


@pytest.mark.parametrize("cap", [1, 2])
def test_the_count_and_the_claim_are_serialised(dsn: str, cap: int) -> None:
    """Two claimers in flight at once: the second waits for the first's commit, then counts
    its rows. Without the limits row lock both would count 0 running and take `cap` each."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        add(setup, "capped", 10)
        limit(setup, "capped", max_running=cap)
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        got_first = claimed(claim(first, ["capped"], 8))  # transaction open: not committed
        assert len(got_first) == cap
        result: list[int] = []
        thread = threading.Thread(
            target=lambda: result.append(len(claimed(claim(second, ["capped"], 8))))
        )
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the second claim waits on the limits row"
        first.commit()
        thread.join(10)
        second.commit()
    assert result == [0]
    with psycopg.connect(dsn) as check:
        row = check.execute(
            "SELECT count(*) FROM taskq.tasks WHERE status = 'PROCESSING'"
        ).fetchone()
    assert row == (cap,)


def test_rate_spends_tokens_and_says_when_the_next_comes(conn: psycopg.Connection[Any]) -> None:
    add(conn, "sms", 50)
    limit(conn, "sms", rate=5.0, rate_text="5/s", burst=5.0)
    rows = claim(conn, ["sms"], 20)
    assert len(claimed(rows)) == 5, "a full bucket: the burst"
    wait = held_for(rows)
    assert wait is not None and 0 < wait <= 0.2 + 1e-9
    again = claim(conn, ["sms"], 20)
    assert len(claimed(again)) <= 1, "the bucket refills at 5 a second, no faster"
    assert held_for(again) is not None, "work waits for a token: the worker is told when"
    held = conn.execute(
        "SELECT count(*) FROM taskq.tasks WHERE task_type = 'sms' AND status = 'PENDING'"
    ).fetchone()
    assert held is not None and held[0] >= 44, "held tasks stay PENDING, never failed"


def test_changing_the_rate_refills_to_the_new_burst(conn: psycopg.Connection[Any]) -> None:
    add(conn, "sms", 50)
    limit(conn, "sms", rate=20.0, rate_text="20/s")
    row = conn.execute("SELECT burst, tokens FROM taskq.flow_limits").fetchone()
    assert row == (20.0, 20.0), "default burst: one second of the rate"
    limit(conn, "sms", rate=5.0, rate_text="5/s")
    row = conn.execute("SELECT rate_text, burst, tokens FROM taskq.flow_limits").fetchone()
    assert row == ("5/s", 5.0, 5.0)
    assert len(claimed(claim(conn, ["sms"], 20))) == 5


def test_per_key_cap_and_fair_share(conn: psycopg.Connection[Any]) -> None:
    add(conn, "tenant.job", 100, key="A")
    add(conn, "tenant.job", 3, key="B")
    limit(conn, "tenant.job", fair=True)
    rows = claimed(claim(conn, ["tenant.job"], 8))
    keys = [r[2] for r in rows]
    assert keys.count("B") == 3, "round-robin: the small tenant is not behind the big one"
    assert keys.count("A") == 5
    limit(conn, "tenant.job", max_running_per_key=6)
    add(conn, "tenant.job", 5, key="B")
    rows = claimed(claim(conn, ["tenant.job"], 8))
    # A runs 5 of its cap of 6, B runs 3: A may take 1 more, B 3 more.
    assert sorted(r[2] for r in rows) == ["A", "B", "B", "B"]


def test_fair_share_rotates_across_claims(conn: psycopg.Connection[Any]) -> None:
    for key in "ABCDEFGHIJ":
        add(conn, "tenant.job", 5, key=key)
    limit(conn, "tenant.job", fair=True)
    seen = [r[2] for _ in range(5) for r in claimed(claim(conn, ["tenant.job"], 2))]
    assert sorted(seen) == list("ABCDEFGHIJ"), "ten keys, five claims of two: each key once"


def test_retry_lane_shares_the_claim(conn: psycopg.Connection[Any]) -> None:
    # Due retries that became runnable before the fresh work was enqueued.
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, retry_count, next_retry_time)"
        " SELECT 'job', 'FAILED', 1, now() - interval '1 hour' FROM generate_series(1, 50)"
    )
    add(conn, "job", 50)
    rows = claimed(claim(conn, ["job"], 10))
    assert sorted(r[3] for r in rows) == [0] * 5 + [1] * 5, "default share 0.5"
    conn.execute("SELECT taskq.queue_limits_set_v1('default', 'test', 0.2)")
    rows = claimed(claim(conn, ["job"], 10))
    assert sorted(r[3] for r in rows) == [0] * 8 + [1] * 2
    conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE status = 'PENDING'")
    rows = claimed(claim(conn, ["job"], 10))
    assert [r[3] for r in rows] == [1] * 10, "no fresh work waits: retries take every slot"


def test_operator_changes_are_audited(conn: psycopg.Connection[Any]) -> None:
    limit(conn, "report.build", max_running=3)
    conn.execute("SELECT taskq.limits_reset_v1('report.build', 'test', 'done')")
    # The actor is the login (the name the tool acts for is kept in detail.by).
    actions = conn.execute(
        "SELECT action, task_type, actor = session_user, detail->>'by' FROM taskq.audit ORDER BY id"
    ).fetchall()
    assert actions == [
        ("limits_set", "report.build", True, "test"),
        ("limits_reset", "report.build", True, "test"),
    ]
    assert conn.execute("SELECT count(*) FROM taskq.flow_limits").fetchone() == (0,)


def test_definer_functions_are_not_public(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE'))"
        " FROM pg_proc AS p WHERE p.pronamespace = 'taskq'::regnamespace AND p.prosecdef"
        " AND p.proname IN ('limits_set_v1', 'limits_reset_v1', 'queue_limits_set_v1')"
    ).fetchone()
    assert row == (False,)


def test_enqueue_function_takes_a_concurrency_key(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT taskq.enqueue('x', concurrency_key => 'tenant-1')").fetchone()
    assert row is not None
    key = conn.execute("SELECT concurrency_key FROM taskq.tasks WHERE id = %s", row).fetchone()
    assert key == ("tenant-1",)
