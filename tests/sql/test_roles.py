"""Least privilege: sql/roles.sql, applied by ``taskq migrate --roles``, against a real server.

Each test connects as LOGIN users of its own (unique names, dropped at teardown) that are
members of one group role, and checks both sides: what the role must be able to do (through
the same code paths production uses: the Python API, ``taskq.enqueue(...)``, a real
``taskq worker`` subprocess, the operator's CLI) and what it must be refused.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

import taskq
from taskq.db import migrate
from taskq.errors import ConfigError
from tests.support import ROOT, WorkerProcess, rows, taskq_cli, wait_until_sync

ROLES_SQL = ROOT / "sql" / "roles.sql"

FAST = [
    "--heartbeat-interval", "0.3", "--reaper-interval", "0.2", "--timeout-grace", "0.5",
    "--poll-interval", "0.3", "--shutdown-timeout", "2",
]  # fmt: skip

# A line of the $grants$ list in roles.sql: ('table', 'worker privileges', 'operator ...'),
GRANT_LINE = re.compile(r"^\s*\('([a-z_][a-z0-9_]*)',\s*'[A-Z, ]*',\s*'[A-Z, ]*'\),?\s*(--.*)?$")

LoginAs = Callable[[str], str]


def granted_tables() -> set[str]:
    return {
        m.group(1) for line in ROLES_SQL.read_text().splitlines() if (m := GRANT_LINE.match(line))
    }


@pytest.fixture
def roles_dsn(dsn: str) -> str:
    """A fresh database with the roles applied (as the superuser that owns the schema)."""
    migrate.apply_roles(dsn)
    return dsn


@pytest.fixture
def login_as(dsn: str) -> Iterator[LoginAs]:
    """``login_as("taskq_worker")`` -> the DSN of a new LOGIN user in that group role."""
    created: list[str] = []

    def make(group: str) -> str:
        name = f"taskq_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(name), sql.Identifier(group)
                )
            )
        created.append(name)
        return make_conninfo(dsn, user=name)

    yield make
    with psycopg.connect(dsn, autocommit=True) as c:
        for name in created:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def login_name(dsn: str) -> str:
    """The user name of a ``login_as`` DSN."""
    return dsn.split("user=")[1].split()[0]


def refused(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """The statement fails for lack of privilege (and changes nothing)."""
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(errors.InsufficientPrivilege):
        c.execute(statement.encode() if not params else statement, params)  # type: ignore[arg-type]


def enqueue_as_root(dsn: str, task_type: str, **columns: Any) -> int:
    names = ["task_type", *columns]
    values = [task_type, *columns.values()]
    found = rows(
        dsn,
        f"INSERT INTO taskq.tasks ({', '.join(names)}) VALUES "
        f"({', '.join(['%s'] * len(values))}) RETURNING id",
        values,
    )
    return int(found[0]["id"])


# --- the file itself ---------------------------------------------------------------------------


def test_every_table_in_the_taskq_schema_has_a_line_in_roles_sql(roles_dsn: str) -> None:
    """A new table without grants fails here: workers would get "permission denied"."""
    tables = {
        r["tablename"]
        for r in rows(roles_dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'taskq'")
    }
    assert {"tasks", "audit", "workers", "alembic_version"} <= tables
    missing = sorted(tables - granted_tables())
    assert not missing, (
        f"tables of schema taskq with no line in sql/roles.sql: {', '.join(missing)}. Add "
        "('<table>', '<worker privileges>', '<operator privileges besides SELECT>') to the "
        "$grants$ list"
    )
    # And the lines took effect: the operator reads every table.
    unreadable = rows(
        roles_dsn,
        "SELECT c.relname FROM pg_class AS c WHERE c.relnamespace = 'taskq'::regnamespace "
        "AND c.relkind IN ('r', 'p') AND NOT has_table_privilege('taskq_operator', c.oid, "
        "'SELECT') ORDER BY 1",
    )
    assert not unreadable


@pytest.mark.slow
def test_roles_sql_is_the_whole_truth_and_safe_to_rerun(roles_dsn: str) -> None:
    def can(role: str, table: str, privilege: str) -> bool:
        return bool(
            rows(
                roles_dsn, "SELECT has_table_privilege(%s, %s, %s) AS ok", (role, table, privilege)
            )[0]["ok"]
        )

    with psycopg.connect(roles_dsn, autocommit=True) as c:
        c.execute("GRANT DELETE, UPDATE ON taskq.audit TO taskq_worker")
    assert can("taskq_worker", "taskq.audit", "DELETE")
    migrate.apply_roles(roles_dsn)  # a privilege not in the file is taken away again
    assert not can("taskq_worker", "taskq.audit", "DELETE")
    assert not can("taskq_worker", "taskq.audit", "UPDATE")
    assert can("taskq_worker", "taskq.tasks", "UPDATE")

    # Many hosts at once against one database: they take turns, none fails.
    failures: list[BaseException] = []

    def apply() -> None:
        try:
            migrate.apply_roles(roles_dsn)
        except BaseException as exc:  # collected for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=apply) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    assert can("taskq_worker", "taskq.workers", "INSERT")
    column = (
        "SELECT has_column_privilege('taskq_enqueuer', 'taskq.tasks', 'payload', 'INSERT') AS ok"
    )
    assert rows(roles_dsn, column)[0]["ok"]


@pytest.mark.slow
def test_roles_apply_to_every_database_of_the_cluster(roles_dsn: str, empty_dsn: str) -> None:
    """Roles are created once per cluster; the grants are per database and land in each."""
    migrate.upgrade(empty_dsn)
    migrate.apply_roles(empty_dsn)
    found = rows(
        empty_dsn,
        "SELECT count(*) AS n FROM pg_roles WHERE rolname IN "
        "('taskq_enqueuer', 'taskq_worker', 'taskq_operator') AND NOT rolcanlogin",
    )
    assert found[0]["n"] == 3
    ok = rows(
        empty_dsn, "SELECT has_table_privilege('taskq_worker', 'taskq.workers', 'INSERT') AS ok"
    )
    assert ok[0]["ok"]


@pytest.mark.slow
def test_migrate_roles_from_the_command_line(dsn: str) -> None:
    result = taskq_cli("migrate", "--roles", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "roles granted: taskq_enqueuer, taskq_worker, taskq_operator" in result.stdout
    ok = rows(
        dsn,
        "SELECT has_function_privilege('taskq_operator', 'taskq.pause_v1(text, text, text, text)',"
        " 'EXECUTE') AS ok",
    )
    assert ok[0]["ok"]


@pytest.mark.slow
def test_migrate_sql_roles_prints_a_script_that_works(empty_dsn: str) -> None:
    """What a DBA reviews is what runs: the printed script, applied as is, builds the schema
    and the grants."""
    result = taskq_cli("migrate", "--sql", "--roles")
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert "CREATE TABLE taskq.tasks" in script
    assert "CREATE ROLE %I NOLOGIN" in script and "GRANT INSERT (task_type" in script
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        c.execute(script.encode())
    ok = rows(
        empty_dsn,
        "SELECT has_column_privilege('taskq_enqueuer', 'taskq.tasks', 'payload', 'INSERT') AS ok",
    )
    assert ok[0]["ok"]


@pytest.mark.slow
def test_apply_roles_refuses_a_role_that_does_not_own_the_schema(
    roles_dsn: str, login_as: LoginAs, empty_dsn: str
) -> None:
    """A GRANT by a non-owner is only a warning in PostgreSQL; roles.sql makes it an error."""
    with pytest.raises(ConfigError, match="does not own the taskq schema"):
        migrate.apply_roles(login_as("taskq_operator"))
    with pytest.raises(psycopg.errors.UndefinedTable, match="run taskq migrate first"):
        migrate.apply_roles(empty_dsn)


# --- taskq_enqueuer ------------------------------------------------------------------------------


@pytest.mark.slow
def test_enqueuer_enqueues_every_way_and_nothing_more(roles_dsn: str, login_as: LoginAs) -> None:
    enqueuer = login_as("taskq_enqueuer")
    secret = enqueue_as_root(roles_dsn, "other.secret", payload=json.dumps({"card": "4111"}))

    with psycopg.connect(roles_dsn, autocommit=True) as listener:
        listener.execute("LISTEN taskq_tasks")
        with psycopg.connect(enqueuer, autocommit=True) as c:
            # Bare INSERT (the contract with other languages), with and without RETURNING.
            c.execute("INSERT INTO taskq.tasks (task_type, payload) VALUES ('deploy.async', '{}')")
            bare = c.execute(
                "INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, priority) "
                "VALUES ('deploy.async', 'default', 'b-1', '{\"n\": 1}', 3) RETURNING id"
            ).fetchone()
            assert bare is not None
            # The SQL function, with a unique key twice: the same live task comes back.
            first = c.execute("SELECT taskq.enqueue('deploy.sync', unique_key => 'k1')").fetchone()
            again = c.execute("SELECT taskq.enqueue('deploy.sync', unique_key => 'k1')").fetchone()
            assert first is not None and again is not None and first[0] == again[0]
        # The statement trigger's NOTIFY fires with the enqueuer's rights.
        notifies = listener.notifies(timeout=2, stop_after=1)
        assert notifies and {n.channel for n in notifies} == {"taskq_tasks"}

    # The Python API, in the caller's transaction: one, unique, many.
    app = taskq.App()
    with psycopg.connect(enqueuer) as c:
        one = app.enqueue(c, "deploy.async", {"n": 2}, biz_id="o-1", priority=5, delay=0)
        u1 = app.enqueue(c, "deploy.once", {"n": 3}, biz_id="order-42", unique=True)
        u2 = app.enqueue(c, "deploy.once", {"n": 3}, biz_id="order-42", unique=True)
        many = app.enqueue_many(
            c,
            [
                taskq.EnqueueItem("deploy.sync", {"i": 1}),
                taskq.EnqueueItem("deploy.once", {}, biz_id="order-42", unique=True),
            ],
        )
        c.commit()
    assert u1 == u2 == many[1] and one not in (u1, many[0])
    with pytest.raises(taskq.AlreadyEnqueued), psycopg.connect(enqueuer) as c:
        app.enqueue(c, "deploy.once", {}, biz_id="order-42", unique=True, on_duplicate="raise")
    assert rows(roles_dsn, "SELECT count(*) AS n FROM taskq.tasks")[0]["n"] == 7

    # It cannot read payloads or errors, change a status, delete, or forge a finished task.
    refused(enqueuer, "SELECT payload FROM taskq.tasks WHERE id = %s", (secret,))
    refused(enqueuer, "SELECT * FROM taskq.tasks")
    refused(enqueuer, "SELECT last_error, context FROM taskq.tasks")
    refused(enqueuer, "UPDATE taskq.tasks SET status = 'PENDING' WHERE id = %s", (secret,))
    refused(enqueuer, "DELETE FROM taskq.tasks WHERE id = %s", (secret,))
    refused(enqueuer, "INSERT INTO taskq.tasks (task_type, status) VALUES ('x', 'SUCCESS')")
    refused(enqueuer, "SELECT * FROM taskq.audit")
    refused(enqueuer, "SELECT * FROM taskq.workers")
    refused(
        enqueuer,
        "INSERT INTO taskq.task_executed (task_type, biz_id, task_id) VALUES ('a', 'b', 1)",
    )
    assert rows(roles_dsn, "SELECT status FROM taskq.tasks WHERE id = %s", (secret,)) == [
        {"status": "PENDING"}
    ]


# --- taskq_worker --------------------------------------------------------------------------------


def start_worker(worker_dsn: str, tmp_path: Path) -> WorkerProcess:
    proc = WorkerProcess(worker_dsn, "tests.apps.deploy:app", *FAST, log_dir=tmp_path / "logs")
    proc.wait_ready()
    return proc


def no_privilege_errors(proc: WorkerProcess) -> None:
    """Nothing the worker did (its background jobs included) was refused for lack of rights."""
    refusals = [
        e
        for e in proc.events()
        if "permission denied" in json.dumps(e) or "InsufficientPrivilege" in json.dumps(e)
    ]
    assert not refusals, refusals


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_worker_role_runs_a_real_worker(roles_dsn: str, login_as: LoginAs, tmp_path: Path) -> None:
    """Claim, complete, fail and retry, progress, checkpoints, child tasks, exactly-once keys,
    schedules, heartbeats and the reaper, all as taskq_worker, tasks enqueued as
    taskq_enqueuer."""
    worker_dsn = login_as("taskq_worker")
    enqueuer = login_as("taskq_enqueuer")
    app = taskq.App()
    with psycopg.connect(enqueuer) as c:
        app.enqueue_many(
            c,
            [taskq.EnqueueItem("deploy.async", {"i": i}) for i in range(20)]
            + [taskq.EnqueueItem("deploy.sync", {"i": i}) for i in range(10)]
            + [taskq.EnqueueItem("deploy.flaky", {"fail": i % 4 == 0}) for i in range(12)]
            + [taskq.EnqueueItem("deploy.parent", {"i": i}) for i in range(3)]
            + [taskq.EnqueueItem("deploy.once", {}, biz_id=f"once-{i}") for i in range(3)],
        )
        blocked = app.enqueue(c, "deploy.block_first", {"seconds": 120})
        c.commit()

    first = start_worker(worker_dsn, tmp_path)

    def settled() -> bool:
        found = rows(
            roles_dsn,
            "SELECT count(*) FILTER (WHERE status <> 'SUCCESS' AND task_type <> "
            "'deploy.block_first') AS open, count(*) FILTER (WHERE task_type = "
            "'deploy.block_first' AND status = 'PROCESSING') AS blocked FROM taskq.tasks",
        )[0]
        return found["open"] == 0 and found["blocked"] == 1

    wait_until_sync(settled, timeout=40, what="every task done but the blocked one")
    flaky = rows(
        roles_dsn,
        "SELECT (payload ->> 'fail')::bool AS fail, retry_count, last_error FROM taskq.tasks "
        "WHERE task_type = 'deploy.flaky'",
    )
    assert (
        sorted((r["fail"], r["retry_count"]) for r in flaky) == [(False, 0)] * 9 + [(True, 1)] * 3
    )
    assert all("first attempt fails" in r["last_error"] for r in flaky if r["fail"])
    children = rows(
        roles_dsn,
        "SELECT c.status, p.context FROM taskq.tasks AS c JOIN taskq.tasks AS p "
        "ON c.parent_id = p.id WHERE p.task_type = 'deploy.parent'",
    )
    assert len(children) == 3 and all(r["context"]["stage"] == "spawned" for r in children)
    assert rows(roles_dsn, "SELECT count(*) AS n FROM taskq.task_executed")[0]["n"] == 3
    wait_until_sync(
        lambda: bool(
            rows(roles_dsn, "SELECT 1 FROM taskq.schedule_ticks WHERE outcome = 'enqueued'")
        ),
        timeout=10,
        what="a schedule tick",
    )

    # Kill the worker holding the blocked task; a second worker's reaper rescues it. The
    # blocked task must be the worker's only attempt when it dies: one that died beside others
    # (a schedule tick) is released uncharged to run alone (the crash judgement in finish.sql),
    # and would block again. So stop the ticks first and wait for the last one to end.
    paused = taskq_cli("pause", "deploy.tick", "--dsn", roles_dsn)
    assert paused.returncode == 0, paused.stderr
    wait_until_sync(
        lambda: any(
            "deploy.tick" in e.get("paused_types", ())
            for e in first.events()
            if e.get("event") == "control_changed"
        ),
        timeout=10,
        what="the worker obeying the pause",
    )
    wait_until_sync(
        lambda: (
            not rows(
                roles_dsn,
                "SELECT 1 FROM taskq.tasks WHERE status = 'PROCESSING' AND task_type <> "
                "'deploy.block_first'",
            )
        ),
        timeout=10,
        what="the blocked task alone in PROCESSING",
    )
    first.kill()
    second = start_worker(worker_dsn, tmp_path)
    wait_until_sync(
        lambda: (
            rows(roles_dsn, "SELECT status FROM taskq.tasks WHERE id = %s", (blocked,))[0]["status"]
            == "SUCCESS"
        ),
        timeout=30,
        what="the blocked task rescued and run again",
    )
    row = rows(
        roles_dsn, "SELECT retry_count, last_error FROM taskq.tasks WHERE id = %s", (blocked,)
    )[0]
    assert row["retry_count"] == 1 and row["last_error"].startswith("WorkerLost")
    assert second.stop() == 0
    for proc in (first, second):
        no_privilege_errors(proc)

    # Nothing beyond its job: no DDL; the audit trail is append-only (and unreadable) for it.
    refused(worker_dsn, "DELETE FROM taskq.audit")
    refused(worker_dsn, "UPDATE taskq.audit SET note = 'rewritten'")
    refused(worker_dsn, "SELECT * FROM taskq.audit")
    refused(worker_dsn, "TRUNCATE taskq.audit")
    refused(worker_dsn, "TRUNCATE taskq.tasks")
    refused(worker_dsn, "DROP TABLE taskq.tasks")
    refused(worker_dsn, "ALTER TABLE taskq.tasks ADD COLUMN x int")
    refused(worker_dsn, "CREATE TABLE taskq.mine (x int)")
    refused(worker_dsn, "DELETE FROM taskq.alembic_version")


# --- taskq_operator ------------------------------------------------------------------------------


@pytest.mark.slow
def test_operator_role_operates_dead_letters_with_an_audit(
    roles_dsn: str, login_as: LoginAs
) -> None:
    operator = login_as("taskq_operator")
    dead = [
        enqueue_as_root(roles_dsn, "deploy.async", status="DEAD_LETTER", last_error="Boom: x")
        for _ in range(2)
    ]

    listed = taskq_cli("dlq", "list", "--json", "--dsn", operator)
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["id"] for r in json.loads(listed.stdout)) == dead
    shown = taskq_cli("dlq", "show", str(dead[0]), "--dsn", operator)
    assert shown.returncode == 0 and "Boom: x" in shown.stdout, shown.stderr

    requeued = taskq_cli("dlq", "requeue", str(dead[0]), "--note", "fixed", "--dsn", operator)
    assert requeued.returncode == 0, requeued.stderr
    discarded = taskq_cli("dlq", "discard", str(dead[1]), "--dsn", operator)
    assert discarded.returncode == 0, discarded.stderr
    assert [r["status"] for r in rows(roles_dsn, "SELECT status FROM taskq.tasks ORDER BY id")] == [
        "PENDING"
    ]
    audit = rows(roles_dsn, "SELECT action, task_id, note, actor FROM taskq.audit ORDER BY id")
    assert [(a["action"], a["task_id"], a["note"]) for a in audit] == [
        ("dlq_requeue", dead[0], "fixed"),
        ("dlq_discard", dead[1], None),
    ]
    # The actor is the operator's login, whatever the tool says (its OS user is in detail.by).
    assert {a["actor"] for a in audit} == {login_name(operator)}

    for command in (["stats", "--json"], ["workers", "--json"], ["schedules", "--json"]):
        result = taskq_cli(*command, "--dsn", operator)
        assert result.returncode == 0, (command, result.stderr)
    stats = taskq_cli("stats", "--dsn", operator)
    assert stats.returncode == 0 and "deploy.async" in stats.stdout, stats.stderr
    enqueued = taskq_cli("enqueue", "deploy.sync", "--dsn", operator)
    assert enqueued.returncode == 0, enqueued.stderr
    # A reaper pass ends attempts, which only the completer's statements do: it is a worker's
    # job, refused to the operator in one line, and done by a worker login.
    reaped = taskq_cli("reap", "--json", "--dsn", operator)
    assert reaped.returncode == 1 and "permission denied" in reaped.stderr, reaped.stderr
    assert "Traceback" not in reaped.stderr
    reaped = taskq_cli("reap", "--json", "--dsn", login_as("taskq_worker"))
    assert reaped.returncode == 0, reaped.stderr

    # The audit trail is append-only for operators too; the schema is not theirs.
    refused(operator, "DELETE FROM taskq.audit")
    refused(operator, "UPDATE taskq.audit SET note = 'rewritten'")
    refused(operator, "DROP TABLE taskq.audit")
    refused(operator, "TRUNCATE taskq.tasks")
    refused(
        operator,
        "INSERT INTO taskq.task_executed (task_type, biz_id, task_id) VALUES ('a', 'b', 1)",
    )


def test_bulk_enqueue_path_by_role(roles_dsn: str, login_as: LoginAs) -> None:
    """enqueue_many COPYs for roles that may set ids (worker, operator) and falls back to
    INSERT ... SELECT for the enqueuer, which may not: both work, ids in order."""
    from taskq.db import store

    for role in ("taskq_worker", "taskq_operator", "taskq_enqueuer"):
        with psycopg.connect(login_as(role)) as conn:
            probe = taskq.App(dsn="unused")._many_params([{"task_type": "bulk.probe"}])
            may_copy = store.copy_tasks(conn, probe)
            conn.rollback()
            ids = taskq.App(dsn="unused").enqueue_many(conn, [{"task_type": "bulk.x"}] * 3)
            conn.commit()
            assert ids == sorted(ids) and len(ids) == 3
            assert (may_copy is None) == (role == "taskq_enqueuer"), role


def test_task_control_by_role(roles_dsn: str, login_as: LoginAs) -> None:
    """A service (enqueuer) cancels its task in its own transaction through the definer
    function, audited as its own login, and reads switches; only the operator sets them or
    handles dead letters."""
    task = enqueue_as_root(roles_dsn, "sms.send")
    enqueuer = login_as("taskq_enqueuer")
    app = taskq.App()
    with psycopg.connect(enqueuer) as c, c.transaction():
        assert app.cancel(c, task) is taskq.Status.CANCELLED
        assert app.switch(c, "sms.sending") is True
    with psycopg.connect(enqueuer, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT taskq.switch_set_v1('sms.sending', false)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("UPDATE taskq.tasks SET status = 'CANCELLED'")
    [audit] = rows(roles_dsn, "SELECT actor, action FROM taskq.audit")
    assert audit["action"] == "cancel" and audit["actor"] == enqueuer.split("user=")[1].split()[0]

    operator = login_as("taskq_operator")
    with psycopg.connect(operator, autocommit=True) as c:
        assert c.execute("SELECT taskq.switch_set_v1('sms.sending', false)").fetchone() == (True,)
        dead = c.execute(
            "INSERT INTO taskq.tasks (task_type, status, finished_at, last_error)"
            " VALUES ('x', 'DEAD_LETTER', now(), 'E: 1') RETURNING id"
        ).fetchone()
        assert dead is not None
        c.execute(
            "SELECT * FROM taskq.dlq_handle_v1(ARRAY[%s]::bigint[], 'investigating', 'me')",
            [dead[0]],
        )
    worker = login_as("taskq_worker")
    with psycopg.connect(worker, autocommit=True) as c:
        assert c.execute("SELECT enabled FROM taskq.switches").fetchone() == (False,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT taskq.dlq_handle_v1(ARRAY[1]::bigint[], 'new')")


# --- least privilege, tightened (0016) -----------------------------------------------------------


def test_operator_writes_only_through_audited_functions(roles_dsn: str, login_as: LoginAs) -> None:
    """No direct UPDATE/DELETE on tasks (nor on the records the functions keep); every write
    the operator's tools make goes through a definer function that writes its audit row, and
    the row's actor is the operator's login, not the name the tool claims to act for."""
    from taskq.dashboard import ops as dashboard_ops
    from taskq.ops import dlq, prune, switches

    operator = login_as("taskq_operator")
    me = login_name(operator)
    dead = [
        enqueue_as_root(roles_dsn, "deploy.async", status="DEAD_LETTER", last_error="Boom: 1")
        for _ in range(5)
    ]
    done = enqueue_as_root(
        roles_dsn, "deploy.async", status="SUCCESS", finished_at="2000-01-01T00:00:00Z"
    )

    refused(operator, "UPDATE taskq.tasks SET status = 'PENDING' WHERE id = %s", (dead[0],))
    refused(operator, "DELETE FROM taskq.tasks WHERE id = %s", (dead[0],))
    refused(operator, "SELECT id FROM taskq.tasks WHERE id = %s FOR UPDATE", (dead[0],))
    refused(operator, "INSERT INTO taskq.audit (actor, action) VALUES ('someone-else', 'x')")
    refused(operator, "INSERT INTO taskq.pauses (kind, name, paused_by) VALUES ('queue', 'q', 'x')")
    refused(operator, "UPDATE taskq.breakers SET state = 'CLOSED'")
    refused(operator, "UPDATE taskq.protection SET level = 0")
    refused(
        operator,
        "INSERT INTO taskq.dead_letters (task_id, dead_at, task_type, fingerprint, updated_by)"
        " VALUES (1, now(), 't', 'f', 'x')",
    )
    # Nor may it write a summary row of any other kind through the run-audit function.
    with (
        psycopg.connect(operator, autocommit=True) as c,
        pytest.raises(errors.InvalidParameterValue),
    ):
        c.execute("SELECT taskq.dlq_run_audit_v1('dlq_requeue', 'forged', '{}')")

    by = "alice via dashboard"
    assert dlq.requeue(operator, dlq.Selection(ids=(dead[0],)), dry_run=True) == [dead[0]]
    assert dlq.requeue(operator, dlq.Selection(ids=(dead[0],)), note="fixed", by=by) == [dead[0]]
    assert dlq.discard(operator, dlq.Selection(ids=(dead[1],)), by=by) == [dead[1]]
    run = dlq.replay(operator, dlq.Selection(ids=(dead[2], dead[3])), batch=1, by=by)
    assert run.done == [dead[2], dead[3]]
    dashboard_ops.requeue_edited(
        operator, dead[4], '{"fixed": true}', reset_retries=True, note=None, by=by,
        max_payload_bytes=10_000,
    )  # fmt: skip
    assert switches.pause(operator, kind="queue", name="sms", by=by)
    assert switches.resume(operator, kind="queue", name="sms", by=by)
    with psycopg.connect(roles_dsn, autocommit=True) as c:
        c.execute("INSERT INTO taskq.breakers (task_type, state) VALUES ('deploy.async', 'OPEN')")
        c.execute("UPDATE taskq.protection SET level = 4")
    assert switches.circuit_reset(operator, by=by) == {
        "closed_breakers": ["deploy.async"],
        "level_reset": True,
    }
    assert switches.set_level(operator, 2, by=by)
    assert prune.prune(operator, older_than_seconds=60).success == 1

    found = rows(roles_dsn, "SELECT id, status, payload FROM taskq.tasks ORDER BY id")
    assert [(r["id"], r["status"]) for r in found] == [
        (dead[0], "PENDING"),
        (dead[2], "PENDING"),
        (dead[3], "PENDING"),
        (dead[4], "PENDING"),
    ]
    assert found[-1]["payload"] == {"fixed": True}
    assert not rows(roles_dsn, "SELECT 1 FROM taskq.tasks WHERE id = %s", (done,))
    assert rows(roles_dsn, "SELECT level FROM taskq.protection") == [{"level": 2}]
    audit = rows(
        roles_dsn, "SELECT actor, action, task_id, detail->>'by' AS by FROM taskq.audit ORDER BY id"
    )
    assert [(a["action"], a["task_id"]) for a in audit] == [
        ("dlq_requeue", dead[0]),
        ("dlq_discard", dead[1]),
        ("dlq_requeue", dead[2]),
        ("dlq_requeue", dead[3]),
        ("dlq_requeue_run", None),
        ("dlq_requeue_edited", dead[4]),
        ("pause", None),
        ("resume", None),
        ("breaker_reset", None),
        ("protection_level", None),
        ("protection_level", None),
        ("prune", None),
    ]
    assert {a["actor"] for a in audit} == {me}
    # The name the tool acts for is kept beside it; the retention pass names nobody else.
    assert [a["by"] for a in audit][:-1] == [by] * (len(audit) - 1)
    assert audit[-1]["by"] is None


def test_the_audit_actor_is_the_login_whoever_inserts(roles_dsn: str) -> None:
    """Even a direct INSERT by the owner cannot name another actor: the trigger stamps the login
    and keeps the name it was given in detail.by."""
    with psycopg.connect(roles_dsn, autocommit=True) as c:
        c.execute("INSERT INTO taskq.audit (actor, action) VALUES ('mallory', 'note')")
        c.execute(
            "INSERT INTO taskq.audit (actor, action, detail) VALUES ('x', 'note', %s)",
            ['{"by": "y"}'],
        )
    found = rows(
        roles_dsn,
        "SELECT actor = session_user AS mine, detail->>'by' AS by FROM taskq.audit ORDER BY id",
    )
    assert found == [{"mine": True, "by": "mallory"}, {"mine": True, "by": "y"}]


def test_worker_takes_a_business_key_only_for_the_attempt_it_holds(
    roles_dsn: str, login_as: LoginAs
) -> None:
    """A worker cannot write the idempotency record directly (which would make a real task be
    skipped as a duplicate): record_business_key_v1 takes the task's own key, and only while
    the caller holds the attempt (PROCESSING with the presented token)."""
    worker = login_as("taskq_worker")
    token, other = uuid.uuid4(), uuid.uuid4()
    running = enqueue_as_root(
        roles_dsn, "points.add", biz_id="order-1", status="PROCESSING", effective_id=token
    )
    waiting = enqueue_as_root(roles_dsn, "points.add", biz_id="order-2")
    finished = enqueue_as_root(
        roles_dsn, "points.add", biz_id="order-3", status="SUCCESS", effective_id=token
    )

    refused(
        worker,
        "INSERT INTO taskq.task_executed (task_type, biz_id, task_id) VALUES ('points.add', "
        "'order-2', %s)",
        (waiting,),
    )
    with psycopg.connect(worker, autocommit=True) as c:
        for task_id, presented in ((running, other), (waiting, token), (finished, token)):
            with pytest.raises(errors.ObjectNotInPrerequisiteState, match="does not hold"):
                c.execute("SELECT taskq.record_business_key_v1(%s, %s)", (task_id, presented))
        assert not rows(roles_dsn, "SELECT 1 FROM taskq.task_executed")
        take = "SELECT taskq.record_business_key_v1(%s, %s)"
        assert c.execute(take, (running, token)).fetchone() == (True,)
        assert c.execute(take, (running, token)).fetchone() == (False,)  # taken already
    assert rows(roles_dsn, "SELECT task_type, biz_id, task_id FROM taskq.task_executed") == [
        {"task_type": "points.add", "biz_id": "order-1", "task_id": running}
    ]


def test_worker_prunes_and_sets_the_level_only_through_the_functions(
    roles_dsn: str, login_as: LoginAs
) -> None:
    """The worker's retention and protection evaluator: no DELETE on tasks, no UPDATE on the
    level, no INSERT on the audit trail; the functions audit as the worker's login."""
    from taskq.ops import prune

    worker = login_as("taskq_worker")
    old = enqueue_as_root(
        roles_dsn, "deploy.async", status="SUCCESS", finished_at="2000-01-01T00:00:00Z"
    )
    refused(worker, "DELETE FROM taskq.tasks WHERE id = %s", (old,))
    refused(worker, "UPDATE taskq.protection SET level = 0")
    refused(worker, "INSERT INTO taskq.audit (actor, action) VALUES ('an operator', 'x')")
    assert prune.prune(worker, older_than_seconds=60).success == 1
    with psycopg.connect(worker, autocommit=True) as c:
        c.execute("SELECT taskq.protection_set_v1(3, 'two types failing', false, 'bob')")
    audit = rows(roles_dsn, "SELECT actor, action, detail FROM taskq.audit ORDER BY id")
    assert [(a["actor"], a["action"]) for a in audit] == [
        (login_name(worker), "prune"),
        (login_name(worker), "protection_level"),
    ]
    assert audit[0]["detail"]["count"] == 1 and audit[1]["detail"]["by"] == "bob"


def test_enqueuer_reads_only_the_unique_key_columns(roles_dsn: str, login_as: LoginAs) -> None:
    """Kept on purpose (sql/roles.sql, README): the unique-key look-up reads id, task_type,
    unique_key and status of every task; nothing else."""
    enqueuer = login_as("taskq_enqueuer")
    enqueue_as_root(roles_dsn, "other.secret", biz_id="customer-7", unique_key="k")
    with psycopg.connect(enqueuer, autocommit=True) as c:
        c.execute("SELECT id, task_type, unique_key, status FROM taskq.tasks").fetchall()
    for column in ("biz_id", "payload", "queue", "trace_id", "progress", "worker_id"):
        refused(enqueuer, f"SELECT {column} FROM taskq.tasks")
