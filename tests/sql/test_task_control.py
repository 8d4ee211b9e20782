"""Task control in SQL: error fingerprints and groups, the dead-letter handling record, the
filters and the bounded requeue batch, business switches, and the CANCELLED state."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from taskq.db import store
from taskq.errors import InvalidTask, TaskNotFound
from taskq.model import DeadLetterFilter, DeadLetterState


def signature(conn: psycopg.Connection[Any], error: str | None) -> str:
    row = conn.execute("SELECT taskq.error_signature_v1(%s)", [error]).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    "error,expected",
    [
        ("ValueError: order 12345 not found\nTraceback ...", "ValueError: order <n> not found"),
        ("KeyError: 'user-77'", "KeyError: ?"),
        (
            'HTTPError: 503 from "https://sms.example/v1/send?id=9"',
            "HTTPError: <n> from ?",
        ),
        (
            "LookupError: no row 3f2504e0-4f89-11d3-9a0c-0305e82c3301 at 0xdeadbeef",
            "LookupError: no row <id> at <n>",
        ),
        ("TimeoutError: timed out after 30s", "TimeoutError: timed out after <n>s"),
        ("Http404Error: user42 missing", "Http404Error: user<n> missing"),
        ("boom", "boom"),
        (None, ""),
    ],
)
def test_error_signature_masks_what_varies(
    conn: psycopg.Connection[Any], error: str | None, expected: str
) -> None:
    assert signature(conn, error) == expected


def _dead(conn: psycopg.Connection[Any], n: int, task_type: str, error: str, age: str = "1 hour"):
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, retry_count, max_retry_count, last_error,"
        " finished_at, biz_id)"
        " SELECT %s, 'DEAD_LETTER', 5, 5, replace(%s, '{i}', i::text),"
        " now() - %s::interval, 'b-' || i FROM generate_series(1, %s) AS i",
        [task_type, error, age, n],
    )


def test_500_dead_letters_from_3_errors_are_3_groups(conn: psycopg.Connection[Any]) -> None:
    _dead(conn, 250, "sms.send", "HTTPError: 503 for order {i}\nTraceback (most recent call last)")
    _dead(conn, 200, "mail.send", "KeyError: 'customer-{i}'")
    _dead(conn, 50, "sync.push", "ValueError: bad amount {i}.{i} for id {i}", age="2 days")
    groups = store.dlq_groups(conn)
    assert [(g["total"], g["new"], g["task_types"]) for g in groups] == [
        (250, 250, ["sms.send"]),
        (200, 200, ["mail.send"]),
        (50, 50, ["sync.push"]),
    ]
    assert groups[0]["signature"] == "HTTPError: <n> for order <n>"
    assert groups[0]["example_error"].startswith("HTTPError: 503 for order ")
    # The same fingerprint selects exactly its group, with any other filter on top.
    fp = groups[1]["fingerprint"]
    assert len(store.dlq_select(conn, where=DeadLetterFilter(fingerprint=fp))) == 200
    assert len(store.dlq_select(conn, where=DeadLetterFilter(older_than_seconds=86400))) == 50
    assert len(store.dlq_select(conn, where=DeadLetterFilter(newer_than_seconds=86400))) == 450
    assert len(store.dlq_select(conn, where=DeadLetterFilter(error="CUSTOMER-1'"))) == 1
    assert len(store.dlq_select(conn, where=DeadLetterFilter(biz_id="b-7"))) == 3
    # LIKE wildcards in the error filter mean themselves.
    assert store.dlq_select(conn, where=DeadLetterFilter(error="%")) == []


def test_requeue_moves_at_most_one_batch_and_resolves_the_record(
    conn: psycopg.Connection[Any],
) -> None:
    _dead(conn, 25, "sms.send", "HTTPError: 503 for order {i}")
    where = DeadLetterFilter(task_type="sms.send")
    moved = store.dlq_requeue(
        conn, reset=False, actor="ops", note="provider back", where=where, batch=10
    )
    assert len(moved) == 10
    assert len(store.dlq_select(conn, where=where)) == 15
    records = conn.execute(
        "SELECT state, resolution, resolved_by, notes->0->>'note' FROM taskq.dead_letters"
    ).fetchall()
    assert records == [("resolved", "requeued", "ops", "provider back")] * 10
    # The next dead-lettering of the same task is a new record: 'new' again.
    conn.execute(
        "UPDATE taskq.tasks SET status = 'DEAD_LETTER', finished_at = now() + interval '1s'"
        " WHERE id = %s",
        [moved[0]],
    )
    new = store.dlq_list(conn, limit=100, where=DeadLetterFilter(state=DeadLetterState.NEW))
    assert len(new) == 16


def test_handling_record_assign_resolve_is_audited_all_or_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    _dead(conn, 3, "mail.send", "KeyError: 'customer-{i}'")
    ids = [r["id"] for r in store.dlq_select(conn)]
    live = conn.execute("INSERT INTO taskq.tasks (task_type) VALUES ('x') RETURNING id").fetchone()
    assert live is not None
    with pytest.raises(TaskNotFound, match=rf"{live[0]} \(PENDING\)"):
        store.dlq_handle(
            conn,
            ids=[*ids, live[0]],
            state="investigating",
            owner="ana",
            resolution=None,
            note=None,
            by="ana@host",
        )
    assert conn.execute("SELECT count(*) FROM taskq.dead_letters").fetchone() == (0,)
    store.dlq_handle(
        conn,
        ids=ids[:2],
        state="investigating",
        owner="ana",
        resolution=None,
        note="looking",
        by="ana@host",
    )
    store.dlq_handle(
        conn,
        ids=ids[:1],
        state="resolved",
        owner=None,
        resolution="ignored",
        note="test data",
        by="bo@host",
    )
    listed = {r["id"]: r for r in store.dlq_list(conn, limit=10)}
    assert (listed[ids[0]]["state"], listed[ids[0]]["owner"], listed[ids[0]]["resolution"]) == (
        "resolved",
        "ana",
        "ignored",
    )
    assert [n["note"] for n in listed[ids[0]]["notes"]] == ["looking", "test data"]
    assert listed[ids[1]]["state"] == "investigating" and listed[ids[2]]["state"] == "new"
    audit = conn.execute(
        "SELECT action, actor, detail->>'by' FROM taskq.audit ORDER BY id"
    ).fetchall()
    me = conn.execute("SELECT session_user").fetchone()
    assert me is not None
    assert audit == [
        ("dlq_assign", me[0], "ana@host"),
        ("dlq_assign", me[0], "ana@host"),
        ("dlq_resolve", me[0], "bo@host"),
    ]
    with pytest.raises(InvalidTask, match="resolution"):
        store.dlq_handle(
            conn, ids=ids, state="resolved", owner=None, resolution=None, note=None, by=None
        )
    report = store.dlq_report(conn, since_seconds=86400)
    assert [(r["total"], r["still_open"]) for r in report["new"]] == [(3, 2)]
    assert [(r["resolution"], r["resolved_by"], r["total"]) for r in report["resolved"]] == [
        ("ignored", "bo@host", 1)
    ]
    assert sorted((r["state"], r["total"]) for r in report["open"]) == [
        ("investigating", 1),
        ("new", 1),
    ]


def test_switches_are_audited_and_notify(conn: psycopg.Connection[Any]) -> None:
    conn.execute("LISTEN taskq_control")
    assert store.switch_get(conn, "sms.sending") is None
    assert store.switch_set(conn, name="sms.sending", enabled=False, note="incident", by="ana")
    assert not store.switch_set(conn, name="sms.sending", enabled=False, note=None, by="ana")
    assert store.switch_get(conn, "sms.sending") is False
    notes = [n.payload for n in conn.notifies(timeout=0.5, stop_after=2)]
    assert notes == ["switches", "switches"]
    assert [(r["name"], r["enabled"], r["note"]) for r in store.switch_list(conn)] == [
        ("sms.sending", False, None)
    ]
    audit = conn.execute("SELECT action, detail->>'was', detail->>'enabled' FROM taskq.audit")
    assert audit.fetchall() == [("switch_set", None, "false"), ("switch_set", "false", "false")]
    with pytest.raises(psycopg.errors.CheckViolation):
        store.switch_set(conn, name=" bad", enabled=True, note=None, by=None)


def test_cancelled_is_a_final_status_and_leaves_the_claim_index(
    conn: psycopg.Connection[Any],
) -> None:
    row = conn.execute(
        "INSERT INTO taskq.tasks (task_type, unique_key) VALUES ('x', 'k') RETURNING id"
    ).fetchone()
    assert row is not None
    store.cancel_tasks(conn, [row[0]], note="n", by="me")
    # A cancelled task no longer holds its unique key: the same key can be enqueued again.
    conn.execute("INSERT INTO taskq.tasks (task_type, unique_key) VALUES ('x', 'k')")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO taskq.tasks (task_type, status) VALUES ('x', 'CANCELED')")


def test_reaper_ends_an_abort_requested_attempt_of_a_dead_worker_cancelled(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    from taskq.worker.reaper import reap_once

    row = conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, effective_id, worker_id, started_at,"
        " timeout_seconds, max_retry_count) VALUES ('x', 'PROCESSING', gen_random_uuid(),"
        " 'gone-worker', now() - interval '1 hour', 60, 5) RETURNING id"
    ).fetchone()
    assert row is not None
    [cancelled] = store.cancel_tasks(conn, [row[0]], note="stuck", by="ops")
    assert cancelled["status_to"] == "PROCESSING"
    result = reap_once(dsn, grace_seconds=1, orphan_after_seconds=1)
    assert result is not None
    after = conn.execute(
        "SELECT status, retry_count, next_retry_time FROM taskq.tasks WHERE id = %s", [row[0]]
    ).fetchone()
    assert after == ("CANCELLED", 0, None)
    outcome = conn.execute("SELECT outcome, n FROM taskq.task_stats").fetchall()
    assert outcome == [("cancelled", 1)]


def test_a_dead_letter_written_by_hand_without_finished_at_is_handled(
    conn: psycopg.Connection[Any],
) -> None:
    """Other languages may INSERT a DEAD_LETTER row with no finished_at: its record is keyed by
    created_at instead, and assign, list and requeue all find it."""
    row = conn.execute(
        "INSERT INTO taskq.tasks (task_type, status, last_error) VALUES ('x', 'DEAD_LETTER',"
        " 'E: 7') RETURNING id"
    ).fetchone()
    assert row is not None
    store.dlq_handle(
        conn,
        ids=[row[0]],
        state="investigating",
        owner="ana",
        resolution=None,
        note=None,
        by=None,
    )
    [listed] = store.dlq_list(conn, limit=5)
    assert (listed["state"], listed["owner"]) == ("investigating", "ana")
    assert store.dlq_requeue(conn, reset=False, actor="ops", note=None) == [row[0]]
    records = conn.execute("SELECT state, resolution, owner FROM taskq.dead_letters").fetchall()
    assert records == [("resolved", "requeued", "ana")]
