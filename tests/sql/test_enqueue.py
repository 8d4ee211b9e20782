"""Enqueueing from Python: in the caller's transaction, sync and async, one or many."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import rows


def make_app() -> taskq.App:
    app = taskq.App(dsn="unused")

    @app.task("sms.notify", queue="sms", priority=3, max_retry_count=7, timeout=30)
    def notify(ctx: taskq.TaskContext, payload: Any) -> None: ...

    return app


def test_enqueue_uses_registered_options(dsn: str) -> None:
    app = make_app()
    with psycopg.connect(dsn) as conn:
        task_id = app.tasks["sms.notify"].enqueue(conn, {"to": "+49"}, biz_id="order-42")
    row = rows(dsn, "SELECT * FROM taskq.tasks WHERE id = %s", (task_id,))[0]
    assert row["queue"] == "sms" and row["priority"] == 3
    assert row["max_retry_count"] == 7 and row["timeout_seconds"] == 30
    assert row["payload"] == {"to": "+49"} and row["biz_id"] == "order-42"
    assert row["status"] == "PENDING" and row["trace_id"]


def test_enqueue_joins_the_callers_transaction(dsn: str) -> None:
    app = make_app()
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE orders (id int)")
        conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO orders VALUES (1)")
            kept = app.enqueue(conn, "sms.notify", {"order": 1})
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("INSERT INTO orders VALUES (2)")
            app.enqueue(conn, "sms.notify", {"order": 2})
            raise RuntimeError("business failure")
    ids = [r["id"] for r in rows(dsn, "SELECT id FROM taskq.tasks")]
    assert ids == [kept]
    assert [r["id"] for r in rows(dsn, "SELECT id FROM orders")] == [1]


def test_enqueue_with_a_cursor_and_overrides(dsn: str) -> None:
    app = make_app()
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        a = app.enqueue(cur, "other.type", None, priority=-5, queue="q2", trace_id="t-1")
        b = app.enqueue(cur, "other.type", [1, 2], scheduled_at=at)
        c = app.enqueue(cur, "other.type", {}, delay=3600)
    got = {
        r["id"]: r for r in rows(dsn, "SELECT *, scheduled_at - created_at AS lag FROM taskq.tasks")
    }
    assert got[a]["priority"] == -5 and got[a]["queue"] == "q2" and got[a]["trace_id"] == "t-1"
    assert got[a]["payload"] == {}
    assert got[b]["scheduled_at"] == at and got[b]["payload"] == [1, 2]
    assert dt.timedelta(minutes=59) < got[c]["lag"] < dt.timedelta(minutes=61)


async def test_async_enqueue_and_rollback(dsn: str) -> None:
    app = make_app()
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        async with aconn.transaction():
            first = await app.enqueue(aconn, "sms.notify", {"n": 1})
            second = await app.tasks["sms.notify"].enqueue(aconn, {"n": 2})
            ids = await app.enqueue_many(aconn, [{"task_type": "sms.notify", "payload": {"n": 3}}])
        with pytest.raises(RuntimeError):
            async with aconn.transaction():
                await app.aenqueue(aconn, "sms.notify", {"n": 4})
                raise RuntimeError("rollback")
    found = [r["payload"]["n"] for r in rows(dsn, "SELECT payload FROM taskq.tasks ORDER BY id")]
    assert found == [1, 2, 3]
    assert second == first + 1 and ids == [second + 1]


def test_enqueue_many_is_one_statement_in_order(dsn: str) -> None:
    app = make_app()
    items = [taskq.EnqueueItem("bulk.item", {"i": i}, biz_id=str(i)) for i in range(2000)]
    with psycopg.connect(dsn) as conn:
        ids = app.enqueue_many(conn, items)
        assert app.enqueue_many(conn, []) == []
    assert len(ids) == 2000 and ids == sorted(ids)
    stored = rows(dsn, "SELECT id, biz_id, payload FROM taskq.tasks ORDER BY id")
    assert [(r["id"], r["biz_id"], r["payload"]["i"]) for r in stored] == [
        (ids[i], str(i), i) for i in range(2000)
    ]


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"task_type": ""}, "must not be empty"),
        ({"task_type": "x" * 201}, "limit is 200"),
        ({"task_type": "bad\ttype"}, "control characters"),
        ({"queue": "q\n"}, "control characters"),
        ({"priority": 40000}, "priority"),
        ({"payload": {"x": {1, 2}}}, "not JSON-serialisable"),
        ({"payload": "x" * 5000}, "limit is 4096 bytes"),
        ({"delay": -1}, "delay"),
        ({"scheduled_at": dt.datetime(2030, 1, 1)}, "timezone-aware"),
        ({"biz_id": 42}, "biz_id"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    dsn: str, kwargs: dict[str, Any], error: str
) -> None:
    app = taskq.App(dsn="unused", max_payload_bytes=4096)
    args: dict[str, Any] = {"task_type": "ok.type", "payload": {}} | kwargs
    with psycopg.connect(dsn) as conn:
        with pytest.raises(taskq.InvalidTask, match=error):
            app.enqueue(conn, args.pop("task_type"), args.pop("payload"), **args)
        with pytest.raises(taskq.InvalidTask):
            app.enqueue_many(conn, [{"task_type": "fine"}, {"task_type": "ok.type", **kwargs}])
        conn.commit()
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.tasks")[0]["n"] == 0


def test_a_one_megabyte_payload_round_trips(dsn: str) -> None:
    app = taskq.App(dsn="unused")
    big = {"blob": "x" * (1024 * 1024)}
    with psycopg.connect(dsn) as conn:
        task_id = app.enqueue(conn, "big", big)
    stored = rows(dsn, "SELECT payload FROM taskq.tasks WHERE id = %s", (task_id,))[0]
    assert stored["payload"] == big
    assert len(json.dumps(stored["payload"])) > 1024 * 1024


def test_bulk_enqueue_by_copy_one_notify_db_clock_and_rollback(dsn: str) -> None:
    """Without unique keys enqueue_many COPYs the rows: still one NOTIFY per batch, scheduled
    times from the database clock, and part of the caller's transaction."""
    app = taskq.App(dsn="unused")
    at = dt.datetime(2031, 5, 1, tzinfo=dt.UTC)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN taskq_tasks")
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                ids = app.enqueue_many(
                    conn,
                    [{"task_type": "b.now", "biz_id": str(i)} for i in range(500)]
                    + [
                        {"task_type": "b.later", "delay": 3600},
                        {"task_type": "b.at", "scheduled_at": at},
                    ],
                )
                db_now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
            with pytest.raises(RuntimeError), conn.transaction():
                app.enqueue_many(conn, [{"task_type": "b.gone"}] * 10)
                raise RuntimeError("rollback")
        notes = list(listener.notifies(timeout=1.0, stop_after=5))
    assert len(notes) == 1 and json.loads(notes[0].payload) == ["default"]
    assert ids == sorted(ids) and len(ids) == 502
    stored = {r["id"]: r for r in rows(dsn, "SELECT * FROM taskq.tasks")}
    assert set(stored) == set(ids)  # the rolled-back batch left nothing
    assert [stored[i]["biz_id"] for i in ids[:500]] == [str(i) for i in range(500)]
    assert stored[ids[0]]["scheduled_at"] == db_now
    assert stored[ids[500]]["scheduled_at"] == db_now + dt.timedelta(hours=1)
    assert stored[ids[501]]["scheduled_at"] == at
    assert stored[ids[0]]["trace_id"] != stored[ids[1]]["trace_id"]


def test_plain_bulk_items_keep_their_own_payload_trace_and_the_types_routing(dsn: str) -> None:
    """Items with only a type and a payload reuse the checked fields of the type's first item
    and COPY only the columns they set: each row still has its own payload and trace id, the
    database clock as its scheduled time, and a type registered later is routed anew."""
    app = taskq.App(dsn="unused")
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            first = app.enqueue_many(
                conn, [{"task_type": "late.type", "payload": {"i": i}} for i in range(3)]
            )
            db_now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

        @app.task("late.type", queue="late-queue", max_retry_count=7)
        def late(payload: Any) -> None: ...

        second = app.enqueue_many(
            conn, [{"task_type": "late.type"}, {"task_type": "late.type", "payload": {"i": 9}}]
        )
        conn.commit()
    stored = {r["id"]: r for r in rows(dsn, "SELECT * FROM taskq.tasks")}
    assert [stored[i]["payload"] for i in first] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert len({stored[i]["trace_id"] for i in first + second}) == 5
    assert all(stored[i]["scheduled_at"] == db_now for i in first)
    assert {(stored[i]["queue"], stored[i]["max_retry_count"]) for i in first} == {
        ("default", None)
    }  # routed by the trigger: no registry row
    assert [stored[i]["payload"] for i in second] == [{}, {"i": 9}]
    assert {(stored[i]["queue"], stored[i]["max_retry_count"]) for i in second} == {
        ("late-queue", 7)
    }


def _plain_batch_with_a_bad_item(bad: dict[str, Any]) -> list[dict[str, Any]]:
    good = [{"task_type": "plain.ok", "payload": {"i": i}} for i in range(300)]
    return [*good, {"task_type": "plain.ok", **bad}, *good]


@pytest.mark.parametrize(
    "bad",
    [{"payload": {"x": {1, 2}}}, {"payload": "x" * 5000}, {"task_type": "bad\ttype"}],
    ids=["unserialisable", "too-big", "bad-name"],
)
def test_a_bad_plain_item_mid_stream_writes_nothing_and_the_transaction_goes_on(
    dsn: str, bad: dict[str, Any]
) -> None:
    """Plain items are checked while the COPY streams: the 301st item's failure rolls the
    batch back to its savepoint, and the caller's own writes before and after stay."""
    app = taskq.App(dsn="unused", max_payload_bytes=4096)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE business (n int)")
        conn.execute("INSERT INTO business VALUES (1)")
        with pytest.raises(taskq.InvalidTask):
            app.enqueue_many(conn, _plain_batch_with_a_bad_item(bad))
        after = app.enqueue_many(conn, [{"task_type": "plain.after"}])
        conn.execute("INSERT INTO business VALUES (2)")
        conn.commit()
    assert [r["n"] for r in rows(dsn, "SELECT n FROM business ORDER BY n")] == [1, 2]
    stored = rows(dsn, "SELECT id, task_type FROM taskq.tasks")
    assert [(r["id"], r["task_type"]) for r in stored] == [(after[0], "plain.after")]


async def test_a_bad_plain_item_mid_stream_async_and_autocommit(dsn: str) -> None:
    app = taskq.App(dsn="unused", max_payload_bytes=4096)
    bad = _plain_batch_with_a_bad_item({"payload": "x" * 5000})
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        await aconn.execute("CREATE TABLE business (n int)")
        await aconn.execute("INSERT INTO business VALUES (1)")
        with pytest.raises(taskq.InvalidTask):
            await app.enqueue_many(aconn, bad)
        ids = await app.enqueue_many(aconn, [{"task_type": "plain.ok"}] * 3)
        await aconn.commit()
    with psycopg.connect(dsn, autocommit=True) as auto:
        with pytest.raises(taskq.InvalidTask):
            app.enqueue_many(auto, bad)
        assert auto.execute("SELECT 1").fetchone() == (1,)  # the connection is fine
    assert [r["n"] for r in rows(dsn, "SELECT n FROM business")] == [1]
    assert [r["id"] for r in rows(dsn, "SELECT id FROM taskq.tasks ORDER BY id")] == ids


def test_single_enqueues_without_options_reuse_the_types_checked_fields(dsn: str) -> None:
    """``app.enqueue(conn, type, payload)`` with no options takes the plain path (the type's
    checked fields kept from its first task): each task still gets its own payload and trace
    id, a type registered later is routed anew, a bad payload or name fails every time, and an
    idempotent type still needs its biz_id."""
    app = taskq.App(dsn="unused")

    @app.task("single.idem", idempotent=True)
    def idem(payload: Any) -> None: ...

    with psycopg.connect(dsn, autocommit=True) as conn:
        first = [app.enqueue(conn, "single.late", {"i": i}) for i in range(3)]

        @app.task("single.late", queue="late-queue", max_retry_count=7)
        def late(payload: Any) -> None: ...

        second = [app.enqueue(conn, "single.late"), app.enqueue(conn, "single.late", {"i": 9})]
        for _ in range(2):
            with pytest.raises(taskq.PayloadError):
                app.enqueue(conn, "single.late", {"x": {1, 2}})
            with pytest.raises(taskq.InvalidTask):
                app.enqueue(conn, "bad\ttype", {})
            with pytest.raises(taskq.InvalidTask, match="biz_id"):
                app.enqueue(conn, "single.idem", {})
    stored = {r["id"]: r for r in rows(dsn, "SELECT * FROM taskq.tasks")}
    assert set(stored) == set(first + second)
    assert [stored[i]["payload"] for i in first + second] == [
        {"i": 0},
        {"i": 1},
        {"i": 2},
        {},
        {"i": 9},
    ]
    assert len({stored[i]["trace_id"] for i in first + second}) == 5
    assert {(stored[i]["queue"], stored[i]["max_retry_count"]) for i in first} == {
        ("default", None)
    }
    assert {(stored[i]["queue"], stored[i]["max_retry_count"]) for i in second} == {
        ("late-queue", 7)
    }
