"""The type registry routes writers that name no queue (issue: bare SQL landed in 'default')."""

from __future__ import annotations

from typing import Any

import psycopg

import taskq
from taskq.db import store
from tests.support import rows


def _register(dsn: str, **options: Any) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("sms.notify", queue="sms", max_retry_count=7, timeout=30, **options)
    def notify(ctx: taskq.TaskContext, payload: Any) -> None: ...

    with psycopg.connect(dsn, autocommit=True) as conn:
        store.register_task_types(conn, "w-1", app.type_registry())
    return app


def _task(dsn: str, task_id: int) -> dict[str, Any]:
    return rows(dsn, "SELECT * FROM taskq.tasks WHERE id = %s", (task_id,))[0]


def test_bare_insert_and_sql_function_get_the_registered_queue_and_options(dsn: str) -> None:
    _register(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        bare = conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload) VALUES ('sms.notify', '{}') RETURNING id"
        ).fetchone()
        func = conn.execute("SELECT taskq.enqueue('sms.notify', '{}')").fetchone()
        explicit = conn.execute(
            "SELECT taskq.enqueue('sms.notify', '{}', queue => 'bulk')"
        ).fetchone()
        named = conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue, max_retry_count) "
            "VALUES ('sms.notify', 'default', 1) RETURNING id"
        ).fetchone()
        unknown = conn.execute("SELECT taskq.enqueue('other.type')").fetchone()
    assert bare and func and explicit and named and unknown
    for task_id in (bare[0], func[0]):
        row = _task(dsn, task_id)
        assert (row["queue"], row["max_retry_count"], row["timeout_seconds"]) == ("sms", 7, 30)
    assert _task(dsn, explicit[0])["queue"] == "bulk"  # an explicit queue wins
    row = _task(dsn, named[0])
    assert (row["queue"], row["max_retry_count"], row["timeout_seconds"]) == ("default", 1, 30)
    row = _task(dsn, unknown[0])
    assert (row["queue"], row["max_retry_count"], row["timeout_seconds"]) == ("default", None, None)


def test_python_producer_that_does_not_register_the_type_is_routed(dsn: str) -> None:
    _register(dsn)
    producer = taskq.App(dsn=dsn)  # another service: it enqueues, it does not run sms.notify
    with psycopg.connect(dsn) as conn:
        one = producer.enqueue(conn, "sms.notify", {"to": "+49"})
        many = producer.enqueue_many(conn, [{"task_type": "sms.notify"}] * 3)
        pinned = producer.enqueue(conn, "sms.notify", {}, queue="default")
    assert {_task(dsn, i)["queue"] for i in [one, *many]} == {"sms"}
    assert _task(dsn, pinned)["queue"] == "default"


def test_registry_upsert_last_writer_wins_and_reconciled_sticks(dsn: str) -> None:
    app = _register(dsn)
    other = taskq.App(dsn=dsn)

    @other.reconciler("sms.notify", every="1d")
    def wanted(conn: Any) -> list[str]:
        return []

    moved = taskq.App(dsn=dsn)

    @moved.task("sms.notify", queue="sms2", timeout=60)
    def notify(ctx: taskq.TaskContext, payload: Any) -> None: ...

    with psycopg.connect(dsn, autocommit=True) as conn:
        store.register_task_types(conn, "w-2", other.type_registry())
        store.register_task_types(conn, "w-3", moved.type_registry())
        registry = {r["task_type"]: r for r in store.list_task_types(conn)}
    row = registry["sms.notify"]
    assert (row["queue"], row["timeout_seconds"], row["reconciled"]) == ("sms2", 60, True)
    assert app.tasks  # the first app registered it; the rolling deploy moved it
