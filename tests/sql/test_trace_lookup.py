"""taskq.task_traces (sql/ddl/0020): a task's trace id is indexed once, when the row is
inserted, by whatever writes it; deletes, truncates and a changed trace id keep it exact; and
the task browser finds a trace's tasks through it."""

from __future__ import annotations

from typing import Any

import psycopg

import taskq
from taskq.db import migrate
from taskq.db.store import panel as panel_store
from taskq.ops.panel import Filters
from tests.support import rows


def traces(conn: psycopg.Connection[Any]) -> set[tuple[str, int]]:
    return {(r[0], r[1]) for r in conn.execute("SELECT trace_id, task_id FROM taskq.task_traces")}


def tasks(conn: psycopg.Connection[Any]) -> set[tuple[str, int]]:
    found = conn.execute("SELECT trace_id, id FROM taskq.tasks WHERE trace_id IS NOT NULL")
    return {(r[0], r[1]) for r in found}


def test_every_way_in_and_out_keeps_the_trace_table_exact(conn: psycopg.Connection[Any]) -> None:
    app = taskq.App(dsn="unused")
    app.enqueue(conn, "t.one", {}, trace_id="trace-a")
    app.enqueue_many(conn, [{"task_type": "t.bulk", "trace_id": "trace-a"}] * 3)  # COPY
    app.enqueue_many(conn, [{"task_type": "t.bulk"}] * 2)  # COPY, fresh trace ids
    app.enqueue_many(conn, [{"task_type": "t.u", "unique_key": "k", "trace_id": "trace-b"}])
    conn.execute("INSERT INTO taskq.tasks (task_type) VALUES ('bare')")  # default trace id
    conn.execute("INSERT INTO taskq.tasks (task_type, trace_id) VALUES ('bare', NULL)")
    conn.execute("SELECT taskq.enqueue('sql.fn', '{}'::jsonb)")
    assert len(tasks(conn)) == 9 and traces(conn) == tasks(conn)

    conn.execute("UPDATE taskq.tasks SET status = 'PROCESSING' WHERE task_type = 't.one'")
    conn.execute("UPDATE taskq.tasks SET trace_id = 'trace-c' WHERE task_type = 't.u'")
    conn.execute("UPDATE taskq.tasks SET trace_id = NULL WHERE task_type = 'sql.fn'")
    conn.execute("UPDATE taskq.tasks SET trace_id = 'set' WHERE trace_id IS NULL")
    assert traces(conn) == tasks(conn)
    assert ("trace-c", rows_of(conn, "t.u")[0]) in traces(conn)

    conn.execute("DELETE FROM taskq.tasks WHERE task_type = 't.bulk'")
    assert len(tasks(conn)) == 5 and traces(conn) == tasks(conn)
    conn.execute("TRUNCATE taskq.tasks")
    assert traces(conn) == set()


def rows_of(conn: psycopg.Connection[Any], task_type: str) -> list[int]:
    found = conn.execute("SELECT id FROM taskq.tasks WHERE task_type = %s", [task_type])
    return [r[0] for r in found]


def test_the_browser_finds_a_trace_through_the_trace_table(conn: psycopg.Connection[Any]) -> None:
    app = taskq.App(dsn="unused")
    mine = app.enqueue_many(conn, [{"task_type": "t", "trace_id": "abc"}] * 3)
    app.enqueue_many(conn, [{"task_type": "t", "trace_id": "other"}] * 2)
    with psycopg.connect(conn.info.dsn, row_factory=psycopg.rows.dict_row) as reader:
        found = panel_store.browse_tasks(reader, Filters(trace_id="abc").params(50))
        assert [r["id"] for r in found] == sorted(mine, reverse=True)
        assert panel_store.browse_tasks(reader, Filters(trace_id="none").params(50)) == []
        assert {r["trace_id"] for r in found} == {"abc"}


def test_upgrading_to_0020_indexes_the_traces_already_there(empty_dsn: str) -> None:
    migrate.upgrade(empty_dsn, "0019")
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        c.execute("INSERT INTO taskq.tasks (task_type, trace_id) VALUES ('old', 't-1')")
        c.execute("INSERT INTO taskq.tasks (task_type) SELECT 'old' FROM generate_series(1, 5)")
    migrate.upgrade(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        assert len(tasks(c)) == 6 and traces(c) == tasks(c)
        assert rows(empty_dsn, "SELECT to_regclass('taskq.tasks_trace_idx') AS i")[0]["i"] is None
    migrate.downgrade(empty_dsn, "0019")
    assert rows(empty_dsn, "SELECT to_regclass('taskq.tasks_trace_idx') AS i")[0]["i"]
