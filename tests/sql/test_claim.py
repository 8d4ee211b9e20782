"""The claim returns the columns of the row it claimed as that row is when claimed, whatever
was committed while the claim statement ran."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from taskq.db.sqlfiles import query
from taskq.db.store.claim import _PayloadLoader, claim_batch
from taskq.model import TaskOptions
from tests import factories
from tests.support import nested_plans, scans_of_tasks, wait_until_sync

PARAMS = {
    "queue": "default",
    "task_types": ["late"],
    "max_retry_counts": [5],
    "timeouts": [60],
    "limit": 10,
    "worker_id": "w",
    "retries_only": False,
    "probe": False,
    "isolated": False,
}


def test_a_task_committed_during_the_claim_keeps_its_traceparent(dsn: str) -> None:
    """The task is inserted before the claim starts (so it is runnable at the claim's now())
    and committed while the function waits on the type's limits row: the claim statement's
    snapshot does not see it, the function's later statements do and claim it. Its traceparent
    must come back with it (read in the statement's own, older snapshot it would be NULL, and
    the attempt span would start a new branch of the trace)."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("INSERT INTO taskq.flow_limits (task_type, max_running) VALUES ('late', 5)")
    with (
        psycopg.connect(dsn) as holder,
        psycopg.connect(dsn) as claimer,
        psycopg.connect(dsn) as producer,
    ):
        producer.execute(
            "INSERT INTO taskq.tasks (task_type, traceparent) VALUES ('late', %s)", (traceparent,)
        )
        holder.execute("SELECT 1 FROM taskq.flow_limits WHERE task_type = 'late' FOR UPDATE")
        claimer_pid = claimer.info.backend_pid
        result: list[dict[str, Any]] = []

        def claim() -> None:
            with claimer.cursor(row_factory=dict_row) as cur:
                result.extend(cur.execute(query("claim_batch"), PARAMS).fetchall())

        thread = threading.Thread(target=claim)
        thread.start()

        def waits_on_the_lock() -> bool:
            row = holder.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (claimer_pid,)
            ).fetchone()
            return row is not None and row[0] == "Lock"

        wait_until_sync(waits_on_the_lock, what="the claim waits on the limits row")
        producer.commit()
        holder.commit()
        thread.join(10)
        claimer.commit()
    [row] = [r for r in result if r["id"] is not None]
    assert row["traceparent"] == traceparent


CLAIMS = ["claim_batch", "claim_few"]  # the full claim, and the one after a short round


def claim(
    dsn: str, *, isolated: bool, limit: int = 10, name: str = "claim_batch", **params: Any
) -> list[int]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        found = conn.execute(
            query(name),
            {**PARAMS, "task_types": ["t"], "limit": limit, "isolated": isolated, **params},
        ).fetchall()
    return sorted(r["id"] for r in found if r["id"] is not None)


@pytest.mark.parametrize("name", CLAIMS)
def test_batches_never_take_an_isolate_row_and_the_isolated_claim_takes_one(
    dsn: str, name: str
) -> None:
    """A task that ran beside a crash (isolate) must run alone: never in a normal batch, and
    the isolator's claim takes one at a time, both lanes (fresh and retrying), through the
    flow limits like any claim."""
    normal = factories.tasks(dsn, 3, task_type="t")
    isolated = factories.tasks(dsn, 2, task_type="t", isolate=True)
    isolated.append(factories.task(dsn, task_type="t", status="FAILED", isolate=True))
    assert claim(dsn, isolated=False, name=name) == normal
    first = claim(dsn, isolated=True, name=name)
    assert len(first) == 1 and set(first) <= set(isolated)
    # Capped like any claim: with 4 of the type running, no isolated row is claimed.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO taskq.flow_limits (task_type, max_running) VALUES ('t', 4)")
    assert claim(dsn, isolated=True, name=name) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM taskq.flow_limits")
    second, third = claim(dsn, isolated=True, name=name), claim(dsn, isolated=True, name=name)
    assert len(second) == len(third) == 1
    assert sorted(first + second + third) == sorted(isolated)
    assert claim(dsn, isolated=True, name=name) == claim(dsn, isolated=False, name=name) == []


def test_isolated_due_names_the_queues_with_runnable_isolate_rows(dsn: str) -> None:
    factories.task(dsn, task_type="t", queue="a", isolate=True)
    factories.task(dsn, task_type="t", queue="b")
    factories.task(dsn, task_type="other", queue="c", isolate=True)
    factories.task(dsn, task_type="t", queue="d", isolate=True, age=-3600)  # not yet due
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            query("isolated_due"), {"queues": ["a", "b", "c", "d"], "task_types": ["t"]}
        ).fetchall()
    assert found == [("a",)]


def test_no_claim_function_runs_with_jit(dsn: str) -> None:
    """A claim's generic plans are costed for a tenth of the runnable rows: past ~100,000 rows
    that crossed jit_above_cost, and every claim spent ~14 ms compiling (sql/ddl/0019). With
    JIT forced on for everything, a claim still compiles nothing."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        missing = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'taskq' AND p.proname LIKE 'claim%%'"
            " AND NOT coalesce('jit=off' = ANY(p.proconfig), false)"
        ).fetchall()
        assert missing == []
        conn.execute(
            "INSERT INTO taskq.tasks (task_type) SELECT 'late' FROM generate_series(1, 50)"
        )
        conn.execute("SET jit = on")
        conn.execute("SET jit_above_cost = 0")
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET client_min_messages = log")
        plans: list[str] = []
        conn.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
        rows = conn.execute(query("claim_batch"), PARAMS).fetchall()
        assert len([r for r in rows if r[0] is not None]) == 10
        nested = [p for p in plans if "Function Scan on claim_batch" not in p]
        assert nested and not any("JIT:" in p for p in nested), plans


@pytest.mark.parametrize("first_rows", [0, 300])
@pytest.mark.parametrize("name", CLAIMS)
def test_a_claim_first_planned_on_a_small_table_keeps_to_the_indexes(
    dsn: str, name: str, first_rows: int
) -> None:
    """A worker that starts on an empty or small queue plans its claim then: the functions
    keep generic plans for the session, made at the first call, until an ANALYZE of the table
    (never, with autovacuum off). On an empty table a sequential scan looked cheapest (0022:
    a 100,000-task backlog drained at 685 tasks/s, each claim of 32 reading the whole table);
    on a few hundred rows, the UPDATE's join to the picked ids became a hash join over a full
    scan of the primary key (0032). Every read of tasks in the claim must be an index scan
    with an index condition, or a scan of a partial index (bounded by its predicate: the
    runnable or the in-flight rows), whatever the table looked like at the first call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Column statistics from an earlier, larger table (ANALYZE keeps them when it samples
        # no row), as after a queue was emptied or its history pruned,
        conn.execute(
            "INSERT INTO taskq.tasks (task_type) SELECT 'late' FROM generate_series(1, 3000)"
        )
        conn.execute("ANALYZE taskq.tasks")
        conn.execute("TRUNCATE taskq.tasks")  # no blocks at all,
        conn.execute("VACUUM ANALYZE taskq.tasks")  # and table statistics that say so;
        if first_rows:  # then a few rows, which the statistics do not know of
            conn.execute(
                "INSERT INTO taskq.tasks (task_type) SELECT 'late' FROM generate_series(1, %s)",
                (first_rows,),
            )
        conn.execute(query(name), PARAMS).fetchall()  # the first call: the plans are made
        conn.execute(
            "INSERT INTO taskq.tasks (task_type) SELECT 'late' FROM generate_series(1, 2000)"
        )
        plans = nested_plans(conn, query(name), PARAMS)
        scans = [s for p in plans for s in scans_of_tasks(p)]
        assert scans, plans
        assert not [s for s in scans if s[0] == "Seq Scan"], scans
        unbounded = [s for s in scans if s[1] == "tasks_pkey" and not s[2]]
        assert unbounded == [], scans
        # Every claim function, the older versions a rolling upgrade still calls included.
        missing = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
            " JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'taskq' AND p.proname LIKE 'claim%%'"
            " AND NOT coalesce('enable_seqscan=off' = ANY(p.proconfig), false)"
        ).fetchall()
        assert missing == []


@pytest.mark.parametrize("name", CLAIMS)
def test_the_claim_returns_when_each_row_became_runnable(dsn: str, name: str) -> None:
    """ready_at (where the dispatch-latency metric starts) is the row's runnable_at before the
    claim: scheduled_at for a PENDING row, even one a hand-written UPDATE left a
    next_retry_time on, and the retry time for a FAILED one. The claim changes the status that
    runnable_at is generated from, so the value must come from the row as it was
    (sql/ddl/0028 reads it from the row itself when there is no next_retry_time)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, status, scheduled_at, next_retry_time,"
            " retry_count) VALUES"
            " ('t', 'PENDING', now() - interval '10 s', NULL, 0),"
            " ('t', 'PENDING', now() - interval '20 s', now() - interval '1 h', 0),"
            " ('t', 'FAILED', now() - interval '1 h', now() - interval '5 s', 1),"
            " ('t', 'FAILED', now() - interval '30 s', NULL, 1)"
        )
        before = dict(conn.execute("SELECT id, runnable_at FROM taskq.tasks").fetchall())
        assert len(set(before.values())) == 4
        with conn.cursor(row_factory=dict_row) as cur:
            found = cur.execute(query(name), {**PARAMS, "task_types": ["t"]}).fetchall()
    claimed = {r["id"]: r["ready_at"] for r in found if r["id"] is not None}
    assert claimed == before


async def test_claimed_payloads_decode_as_json_loads_reads_them(dsn: str) -> None:
    """The claim's jsonb loader skips ``json.loads``' encoding detection and whitespace
    matching (jsonb output has neither a BOM nor blanks around the value): any payload must
    still come back as ``json.loads`` reads PostgreSQL's text of it."""
    payloads = [
        '{"a": [1, 2.5, null, true], "b": {"c": "d"}}',
        '"just a string"',
        "42",
        "null",
        "[]",
        '{"unicode": "żółć 漢字 \\"quoted\\" \\\\ tab\\t"}',
        '{"big": 123456789012345678901234567890, "exp": 1e-7}',
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for payload in payloads:
            conn.execute(
                "INSERT INTO taskq.tasks (task_type, payload) VALUES ('t', %s::jsonb)", [payload]
            )
        texts = [
            json.loads(r[0])
            for r in conn.execute("SELECT payload::text FROM taskq.tasks ORDER BY id").fetchall()
        ]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        claimed = await claim_batch(
            aconn,
            queue="default",
            handlers=[TaskOptions(task_type="t")],
            limit=20,
            worker_id="w",
        )
    assert [t.payload for t in sorted(claimed, key=lambda t: t.id)] == texts


def test_a_jsonb_binary_value_of_an_unknown_version_is_refused() -> None:
    loader = _PayloadLoader(0)
    assert loader.load(b'\x01{"a": [1, "b"]}') == {"a": [1, "b"]}
    with pytest.raises(psycopg.DataError, match="unknown jsonb binary format"):
        loader.load(b'\x02{"a": 1}')
