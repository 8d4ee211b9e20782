"""The schema: migrations, constraints, the NOTIFY trigger, the SQL enqueue function, and the
claim plan."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
import pytest

from taskq.db import migrate
from tests.support import nested_plans, rows, taskq_command


@pytest.mark.slow
def test_migrations_upgrade_downgrade_upgrade(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn)
    assert rows(empty_dsn, "SELECT version_num FROM taskq.alembic_version")[0]["version_num"]
    migrate.downgrade(empty_dsn, "base")
    assert not rows(empty_dsn, "SELECT to_regclass('taskq.tasks') AS t")[0]["t"]
    migrate.upgrade(empty_dsn)
    assert rows(empty_dsn, "SELECT to_regclass('taskq.tasks') AS t")[0]["t"]


def test_a_database_at_the_released_0009_upgrades_to_head(empty_dsn: str) -> None:
    """A released revision keeps its number and its content: 0009 is the edges migration (the
    type registry), as the first release shipped it, and a database left there upgrades to
    head. Renumbering it once made alembic skip the migration that took its number."""
    migrate.upgrade(empty_dsn, "0009")
    assert rows(empty_dsn, "SELECT to_regclass('taskq.task_types') AS t")[0]["t"]
    migrate.upgrade(empty_dsn)
    assert rows(
        empty_dsn,
        "SELECT to_regprocedure('taskq.count_outcome_v1(text, text, text, bigint,"
        " double precision)') AS f",
    )[0]["f"]


@pytest.mark.slow
def test_upgrade_from_many_hosts_at_once(empty_dsn: str) -> None:
    """Four `taskq migrate` processes race on an empty database: the advisory lock makes one
    build the schema while the others wait, then find it at head."""
    procs = [
        subprocess.Popen(
            [*taskq_command(), "migrate", "--dsn", empty_dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    assert rows(empty_dsn, "SELECT count(*) AS n FROM taskq.alembic_version")[0]["n"] == 1
    migrate.upgrade(empty_dsn)  # and once more: nothing to do


def test_migrate_sql_prints_the_ddl() -> None:
    text = migrate.sql_script()
    assert "CREATE TABLE taskq.tasks" in text
    assert "CREATE TRIGGER tasks_notify_insert" in text
    assert "CREATE FUNCTION taskq.enqueue" in text


def test_public_columns_exist(conn: psycopg.Connection[Any]) -> None:
    cols = {
        r[0]
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'taskq' AND table_name = 'tasks'"
        )
    }
    public = {
        "id",
        "task_type",
        "queue",
        "biz_id",
        "payload",
        "status",
        "priority",
        "scheduled_at",
        "retry_count",
        "max_retry_count",
        "next_retry_time",
        "last_error",
        "timeout_seconds",
        "started_at",
        "finished_at",
        "effective_id",
        "worker_id",
        "progress",
        "trace_id",
        "created_at",
        "updated_at",
    }
    assert public <= cols


def test_bare_insert_gets_defaults(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "INSERT INTO taskq.tasks (task_type, payload) VALUES ('sms.notify', '{\"to\": 1}')"
        " RETURNING queue, status, priority, retry_count, max_retry_count, trace_id,"
        " scheduled_at <= now() AS due"
    ).fetchone()
    assert row is not None
    queue, status, priority, retry_count, max_retry, trace_id, due = row
    # max_retry_count is left to the handler that will claim it
    assert (queue, status, priority, retry_count, max_retry, due) == (
        "default",
        "PENDING",
        0,
        0,
        None,
        True,
    )
    assert trace_id and len(trace_id) == 32


# The indexes a plain task's row enters when it is claimed and when it succeeds. A status change
# is never a HOT update, so every index whose predicate admits the new row version takes a new
# entry, twice per task: each one here is paid on the hot path (bench/: a btree on trace_id cost
# a quarter of a drain's database CPU, a hash index on it ~7 us per task, so trace ids are
# indexed once, at insert, in taskq.task_traces). Add to these sets only with a benchmark.
HOT_PATH_INDEXES = {
    "PROCESSING": {"tasks_pkey", "tasks_processing_idx"},
    "SUCCESS": {"tasks_pkey", "tasks_finished_idx"},
}


@pytest.mark.parametrize("status", sorted(HOT_PATH_INDEXES))
def test_a_claim_and_a_completion_write_only_the_indexes_they_need(
    conn: psycopg.Connection[Any], status: str
) -> None:
    """Every index on taskq.tasks whose predicate admits a plain task (no biz_id, keys or
    parent, as most tasks are) in ``status``, checked by evaluating each predicate on such a
    row in this rolled-back transaction."""
    [(task_id,)] = conn.execute(
        "INSERT INTO taskq.tasks (task_type, payload, status, started_at, finished_at,"
        " effective_id, worker_id) VALUES ('plain', '{}', %s, now(), now(),"
        " gen_random_uuid(), 'w') RETURNING id",
        (status,),
    ).fetchall()
    indexes = conn.execute(
        "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index AS i"
        " JOIN pg_class AS c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'taskq.tasks'::regclass"
    ).fetchall()
    entered = set()
    for name, predicate in indexes:
        if predicate is None:
            entered.add(name)
            continue
        [(admits,)] = conn.execute(
            f"SELECT {predicate} FROM taskq.tasks WHERE id = %s",  # type: ignore[arg-type]
            (task_id,),
        ).fetchall()
        if admits:
            entered.add(name)
    assert entered == HOT_PATH_INDEXES[status]


@pytest.mark.parametrize(
    "column,value",
    [
        ("task_type", ""),
        ("task_type", "x" * 201),
        ("task_type", "a\nb"),
        ("queue", " q"),
        ("status", "DONE"),
    ],
)
def test_constraints_reject_bad_rows(
    conn: psycopg.Connection[Any], column: str, value: str
) -> None:
    values = {"task_type": "ok", "queue": "default", "status": "PENDING", column: value}
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue, status) VALUES (%s, %s, %s)",
            (values["task_type"], values["queue"], values["status"]),
        )


@pytest.mark.parametrize("column", ["task_type", "queue"])
def test_an_update_that_sets_a_bad_name_is_refused_as_the_constraint(
    conn: psycopg.Connection[Any], column: str
) -> None:
    """The name rules run on an UPDATE that sets a name (a requeue to another queue, an
    operator's fix-up), and the error is the constraint's: SQLSTATE 23514 with its name, the
    producer's value kept out of the message."""
    [(task_id,)] = conn.execute(
        "INSERT INTO taskq.tasks (task_type, queue) VALUES ('ok', 'default') RETURNING id"
    ).fetchall()
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        conn.execute(
            f"UPDATE taskq.tasks SET {column} = %s WHERE id = %s",  # type: ignore[arg-type]
            ("bad\x1b[31m", task_id),
        )
    assert caught.value.diag.constraint_name == f"tasks_{column}_check"
    assert "\x1b" not in str(caught.value)


NAMES = ["ok", "a.b-c_d:e/f", "x" * 200, "", "x" * 201, " q", "q ", "a\nb", "tab\there", "é"]


def test_the_insert_trigger_and_the_rule_function_agree(conn: psycopg.Connection[Any]) -> None:
    """The INSERT trigger refuses exactly the names taskq.valid_name_v1 refuses, on either
    column, and names the column's constraint in the error."""
    for name in NAMES:
        [(valid,)] = conn.execute("SELECT taskq.valid_name_v1(%s)", (name,)).fetchall()
        for column in ("task_type", "queue"):
            values = {"task_type": "ok", "queue": "default", column: name}
            try:
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO taskq.tasks (task_type, queue) VALUES (%s, %s)",
                        (values["task_type"], values["queue"]),
                    )
                accepted = True
            except psycopg.errors.CheckViolation as exc:
                assert exc.diag.constraint_name == f"tasks_{column}_check"
                accepted = False
            assert accepted == valid, (column, name)


def test_a_bare_insert_routed_to_its_queue_passes_the_name_rules(
    conn: psycopg.Connection[Any],
) -> None:
    """The name trigger fires after the routing trigger (BEFORE triggers fire in name order):
    a bare INSERT that leaves queue NULL is checked with the queue routing filled in."""
    [(queue,)] = conn.execute(
        "INSERT INTO taskq.tasks (task_type) VALUES ('ok') RETURNING queue"
    ).fetchall()
    assert queue == "default"


def test_claims_and_completions_do_not_evaluate_the_name_rules(
    conn: psycopg.Connection[Any],
) -> None:
    """A CHECK constraint runs on every UPDATE, whatever it sets; the name rules (a regular
    expression per name) cost 7-9 % of the database's CPU per task that way (sql/ddl/0021). So
    no CHECK on taskq.tasks reads task_type or queue, and the rules run from triggers that
    fire only on INSERT and on an UPDATE that sets one of them."""
    checks = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'taskq.tasks'::regclass"
        " AND contype = 'c' AND conkey && ARRAY(SELECT attnum FROM pg_attribute"
        " WHERE attrelid = 'taskq.tasks'::regclass AND attname IN ('task_type', 'queue'))"
    ).fetchall()
    assert checks == []
    [(update_trigger,)] = conn.execute(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = 'taskq.tasks'::regclass AND tgname = 'tasks_valid_names_update'"
    ).fetchall()
    assert "AFTER UPDATE OF task_type, queue ON" in update_trigger
    assert "FOR EACH ROW WHEN" in update_trigger
    # A BEFORE UPDATE row trigger, whatever its columns, locks each updated row first: one
    # more WAL record per claim and per completion.
    [(before_update,)] = conn.execute(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'taskq.tasks'::regclass"
        " AND NOT tgisinternal AND tgtype & (1 << 1) <> 0 AND tgtype & (1 << 4) <> 0"
    ).fetchall()
    assert before_update == 0


def test_the_name_rules_on_insert_run_once_per_statement(
    conn: psycopg.Connection[Any],
) -> None:
    """PostgreSQL compiles a trigger's WHEN on every statement: the name rules' WHEN cost a
    one-row INSERT ~14 us of its ~72 us in the server (sql/ddl/0026). So on INSERT they run
    from a statement trigger over the new rows, and no BEFORE INSERT row trigger names them.
    That trigger is the only AFTER INSERT one: it also indexes trace ids and sends the NOTIFY,
    since each trigger call costs a one-row INSERT ~10 us (sql/ddl/0027)."""
    after_insert = conn.execute(
        "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = 'taskq.tasks'::regclass AND NOT tgisinternal"
        " AND tgtype & (1 << 1) = 0 AND tgtype & (1 << 2) <> 0"
    ).fetchall()
    assert [name for name, _ in after_insert] == ["tasks_inserted"]
    [(_, kind)] = after_insert
    assert "AFTER INSERT ON taskq.tasks REFERENCING NEW TABLE AS new_rows" in kind
    assert "FOR EACH STATEMENT" in kind
    before_insert_row = conn.execute(
        "SELECT tgname FROM pg_trigger"
        " WHERE tgrelid = 'taskq.tasks'::regclass AND NOT tgisinternal"
        " AND tgtype & 1 <> 0 AND tgtype & (1 << 1) <> 0 AND tgtype & (1 << 2) <> 0"
        " ORDER BY tgname"
    ).fetchall()
    assert before_insert_row == [("tasks_payload_size_insert",), ("tasks_route_insert",)]


def test_a_multi_row_insert_with_one_bad_name_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    """Checked after the statement's rows are written, the statement still fails whole."""
    with pytest.raises(psycopg.errors.CheckViolation) as caught, conn.transaction():
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue)"
            " VALUES ('ok', 'default'), ('ok', 'bad\x1b'), ('also.ok', 'default')"
        )
    assert caught.value.diag.constraint_name == "tasks_queue_check"
    assert conn.execute("SELECT count(*) FROM taskq.tasks").fetchone() == (0,)


def test_sql_enqueue_function_with_named_arguments(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute(
        "SELECT taskq.enqueue('sms.notify', '{\"to\": \"+49\"}', biz_id => 'order-42',"
        " priority => 5, queue => 'sms', delay => interval '1 hour')"
    ).fetchone()
    assert row is not None
    task = conn.execute(
        "SELECT task_type, payload, biz_id, priority, queue, status,"
        " scheduled_at > now() + interval '59 minutes' AS later FROM taskq.tasks WHERE id = %s",
        (row[0],),
    ).fetchone()
    assert task == ("sms.notify", {"to": "+49"}, "order-42", 5, "sms", "PENDING", True)
    minimal = conn.execute("SELECT taskq.enqueue('x.y')").fetchone()
    assert minimal is not None and minimal[0] > row[0]


def _drain_notifies(listener: psycopg.Connection[Any], wait: float) -> list[psycopg.Notify]:
    got: list[psycopg.Notify] = []
    while True:
        batch = list(listener.notifies(timeout=wait))
        if not batch:
            return got
        got.extend(batch)
        wait = 0.2


@pytest.mark.slow
def test_one_notify_per_insert_statement(dsn: str, conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN taskq_tasks")
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue, payload)"
            " SELECT 'bulk', CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END, jsonb_build_object('i', i)"
            " FROM generate_series(1, 10000) AS i"
        )
        got = _drain_notifies(listener, 2.0)
        assert len(got) == 1
        assert sorted(json.loads(got[0].payload)) == ["a", "b"]

        # A future-scheduled row wakes nobody: the poll finds it when it is due.
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, scheduled_at) VALUES ('later', now() + '1h')"
        )
        assert _drain_notifies(listener, 0.3) == []

        # A rolled-back insert sends nothing.
        with psycopg.connect(dsn) as tx:
            tx.execute("INSERT INTO taskq.tasks (task_type) VALUES ('never')")
            tx.rollback()
        assert _drain_notifies(listener, 0.3) == []


def test_claim_is_an_index_scan_that_ignores_history(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, finished_at)"
        " SELECT 't', 'SUCCESS', now() FROM generate_series(1, 50000)"
    )
    conn.execute("INSERT INTO taskq.tasks (task_type) SELECT 't' FROM generate_series(1, 500)")
    conn.execute("ANALYZE taskq.tasks")
    from taskq.db.sqlfiles import query

    plans = nested_plans(
        conn,
        query("claim_batch"),
        {
            "queue": "default",
            "task_types": ["t"],
            "max_retry_counts": [5],
            "timeouts": [60],
            "limit": 10,
            "worker_id": "w",
            "retries_only": False,
            "probe": False,
            "isolated": False,
        },
    )
    assert plans, "auto_explain reported no nested statement"
    for plan in plans:
        # The planner must think each statement cheap: a plan costed past jit_above_cost is
        # JIT-compiled on every execution (hundreds of milliseconds for a claim that takes one).
        assert "JIT" not in plan and plan["Plan"]["Total Cost"] < 10_000, plan["Query Text"]
        assert not _seq_scans(plan["Plan"], "tasks"), plan["Query Text"]
    scans = [n for p in plans for n in _find(p["Plan"], "Index Scan", "tasks_runnable_by_type_idx")]
    # The scans stop after the LIMIT: they never read the 50,000 finished rows. Both lanes
    # read the type's entries (no FAILED row: the retry lane's scan is an empty probe).
    assert scans and all(n["Actual Rows"] <= 10 for n in scans)
    assert [n for n in scans if n["Actual Rows"] == 0]


@pytest.mark.parametrize(
    "name", ["mark_success_many", "mark_failed_many", "mark_dead_many", "release_many"]
)
def test_completions_go_through_the_primary_key(conn: psycopg.Connection[Any], name: str) -> None:
    """A bloated tasks_processing_idx (every claim adds an entry, vacuum removes them) must not
    be where a completion looks, whatever the statistics say."""
    from taskq.db.sqlfiles import query

    conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, finished_at)"
        " SELECT 't', 'SUCCESS', now() FROM generate_series(1, 30000)"
    )
    conn.execute("ANALYZE taskq.tasks")  # statistics: nothing in flight
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, effective_id)"
        " SELECT 't', 'PROCESSING', gen_random_uuid() FROM generate_series(1, 2000)"
    )
    found = conn.execute(
        "SELECT id, effective_id FROM taskq.tasks WHERE status = 'PROCESSING' LIMIT 32"
    ).fetchall()
    n = len(found)
    params = {
        "ids": [r[0] for r in found],
        "tokens": [r[1] for r in found],
        "outcome": "success",
        "errors": ["e"] * n,
        "afters": [None] * n,
        "delays": [1.0] * n,
        "jitters": [0.0] * n,
        "counts": [True] * n,
        "threshold": 5,
    }
    plan_rows = conn.execute(
        psycopg.sql.SQL("EXPLAIN (FORMAT JSON) ") + psycopg.sql.SQL(query(name)), params
    ).fetchone()
    assert plan_rows is not None
    text = json.dumps(plan_rows[0])
    assert "tasks_pkey" in text and "tasks_processing_idx" not in text
    assert not _seq_scans(plan_rows[0][0]["Plan"], "tasks")
    assert plan_rows[0][0]["Plan"]["Total Cost"] < 10_000


def _seq_scans(node: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    found = []
    if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == relation:
        found.append(node)
    for child in node.get("Plans", []):
        found.extend(_seq_scans(child, relation))
    return found


def _find(node: dict[str, Any], kind: str, index: str) -> list[dict[str, Any]]:
    found = []
    if node.get("Node Type") == kind and node.get("Index Name") == index:
        found.append(node)
    for child in node.get("Plans", []):
        found.extend(_find(child, kind, index))
    return found
