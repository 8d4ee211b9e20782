"""The operator's web page (`taskq dashboard`) over HTTP, against a real database: the numbers it
shows, the dead-letter filters and actions, the audit trail it writes, live progress, and the
security model (loopback or token, CSRF, read-only, escaping, headers)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from taskq.dashboard import DashboardSettings, create_app
from taskq.dashboard.security import Auth
from tests import factories
from tests.support import ROOT, count, execute, rows, taskq_cli, taskq_command, wait_until_sync

TOKEN = "correct-horse-battery-staple-4242"
XSS = "<script>alert(1)</script>"


def client(dsn: str, base_url: str = "http://127.0.0.1", **settings: Any) -> TestClient:
    app = create_app(DashboardSettings(dsn=dsn, **settings))
    return TestClient(app, base_url=base_url, follow_redirects=False)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tables(HTMLParser):
    """Every ``<tr>`` with its data-* attributes and the text of its ``data-k`` cells, grouped by
    the id of the table body (or table) it sits in."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self._where = ""
        self._row: dict[str, Any] | None = None
        self._cell: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("tbody", "table") and a.get("id"):
            self._where = a["id"] or ""
        elif tag == "tr":
            data = {k: v for k, v in a.items() if k.startswith("data-")}
            self._row = {"attrs": data, "cells": {}} if data else None
        elif tag == "td" and self._row is not None and a.get("data-k"):
            self._cell = a["data-k"]
            self._row["cells"][self._cell] = ""

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cell is not None:
            self._row["cells"][self._cell] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.setdefault(self._where, []).append(self._row)
            self._row = None


def listed_ids(page: str, table: str = "dlq-table") -> list[int]:
    return [int(r["attrs"]["data-task-id"]) for r in Tables(page).rows.get(table, [])]


def insert(dsn: str, **columns: Any) -> int:
    """One task row in any state; values are SQL expressions."""
    names = ", ".join(columns)
    values = ", ".join(str(v) for v in columns.values())
    statement = f"INSERT INTO taskq.tasks ({names}) VALUES ({values}) RETURNING id"
    found = rows(dsn, statement.replace("%", "%%"))  # psycopg reads % as a placeholder
    return int(found[0]["id"])


def dead(dsn: str, task_type: str, error: str, hours_ago: float, **more: Any) -> int:
    return factories.task(
        dsn,
        task_type=task_type,
        status="DEAD_LETTER",
        last_error=error,
        retry_count=3,
        max_retry_count=3,
        age=hours_ago * 3600 + 1,
        finished_ago=hours_ago * 3600,
        **more,
    )


# --- the overview ------------------------------------------------------------------------------


def seed_overview(dsn: str) -> None:
    execute(
        dsn,
        """
        INSERT INTO taskq.tasks (queue, task_type, status, scheduled_at, next_retry_time,
                                 started_at, effective_id, worker_id, finished_at)
        SELECT 'mail', 'mail.send', s.status, s.scheduled_at, s.next_retry_time, s.started_at,
               s.effective_id, s.worker_id, s.finished_at
        FROM (VALUES
            ('PENDING', now() - interval '2 minutes', NULL::timestamptz, NULL::timestamptz,
             NULL::uuid, NULL, NULL::timestamptz, 3),
            ('PENDING', now() + interval '1 hour', NULL, NULL, NULL, NULL, NULL, 2),
            ('FAILED', now() - interval '1 hour', now() - interval '1 second', NULL, NULL, NULL,
             NULL, 1),
            ('FAILED', now() - interval '1 hour', now() + interval '10 minutes', NULL, NULL,
             NULL, NULL, 2),
            ('PROCESSING', now() - interval '1 minute', NULL, now(), gen_random_uuid(), 'w1',
             NULL, 1),
            ('DEAD_LETTER', now() - interval '1 day', NULL, NULL, NULL, NULL, now(), 2),
            ('SUCCESS', now() - interval '1 day', NULL, NULL, NULL, NULL, now(), 5)
        ) AS s(status, scheduled_at, next_retry_time, started_at, effective_id, worker_id,
               finished_at, n),
        generate_series(1, s.n);

        INSERT INTO taskq.tasks (queue, task_type, scheduled_at)
        VALUES ('sms', 'sms.notify', now() - interval '10 minutes');
        INSERT INTO taskq.tasks (queue, task_type, status, started_at, effective_id, worker_id)
        SELECT 'sms', 'sms.notify', 'PROCESSING', now(), gen_random_uuid(), 'w1'
        FROM generate_series(1, 3);
        INSERT INTO taskq.tasks (queue, task_type, status, finished_at)
        VALUES ('mail', 'mail.digest', 'DEAD_LETTER', now());

        INSERT INTO taskq.task_stats (bucket, queue, task_type, outcome, n)
        VALUES (date_trunc('minute', now()) - interval '5 minutes', 'mail', 'mail.send',
                'success', 90),
               (date_trunc('minute', now()) - interval '5 minutes', 'mail', 'mail.send',
                'failed', 10);
        INSERT INTO taskq.workers (id, host, pid, queues, version, lease_seconds)
        VALUES ('w1', 'host-a', 1234, '{"mail": 4, "sms": 2}', 'test', 30);
        INSERT INTO taskq.pauses (kind, name, paused_by, note)
        VALUES ('task_type', 'sms.notify', 'alice@ops', 'provider down');
        INSERT INTO taskq.breakers (task_type, state, opened_at, reason)
        VALUES ('mail.send', 'OPEN', now(), '10 failures in a row');
        UPDATE taskq.protection SET level = 2, reason = 'two types failing';
        """,
    )


def expected_backlog(dsn: str) -> dict[tuple[str, str], dict[str, int]]:
    """The backlog as the database counts it, status by status."""
    found = rows(
        dsn,
        """
        SELECT queue, task_type,
            count(*) FILTER (WHERE status IN ('PENDING', 'FAILED')
                             AND coalesce(CASE WHEN status = 'FAILED' THEN next_retry_time END,
                                          scheduled_at) <= now()) AS runnable,
            count(*) FILTER (WHERE status = 'PENDING' AND scheduled_at > now()) AS scheduled,
            count(*) FILTER (WHERE status = 'FAILED' AND next_retry_time > now())
                AS retry_waiting,
            count(*) FILTER (WHERE status = 'PROCESSING') AS running,
            count(*) FILTER (WHERE status = 'DEAD_LETTER') AS dead_letter
        FROM taskq.tasks GROUP BY queue, task_type
        """,
    )
    keys = ("runnable", "scheduled", "retry_waiting", "running", "dead_letter")
    return {(r["queue"], r["task_type"]): {k: int(r[k]) for k in keys} for r in found}


@pytest.mark.slow
def test_overview_numbers_equal_the_database(dsn: str) -> None:
    seed_overview(dsn)
    expected = expected_backlog(dsn)
    # The seed is what we think it is (so the comparison below compares something).
    assert expected[("mail", "mail.send")] == {
        "runnable": 4,
        "scheduled": 2,
        "retry_waiting": 2,
        "running": 1,
        "dead_letter": 2,
    }
    c = client(dsn)

    data = c.get("/api/overview").json()
    by_key = {
        (r["attrs"]["data-queue"], r["attrs"]["data-task-type"]): {
            cell["k"]: cell for cell in r["cells"]
        }
        for r in data["tables"]["types"]
    }
    assert set(by_key) == set(expected)
    for key, numbers in expected.items():
        for k, n in numbers.items():
            assert by_key[key][k]["value"] == n, (key, k)
    mail = by_key[("mail", "mail.send")]
    assert mail["failure_rate"]["text"] == "10.0%"  # 10 failed of 100 attempts in the hour
    assert mail["per_minute"]["text"] == "1.50"  # 90 successes / 60 minutes
    assert mail["state"]["text"] == "breaker OPEN"
    assert by_key[("sms", "sms.notify")]["state"]["text"] == "paused"
    assert by_key[("sms", "sms.notify")]["oldest_runnable"]["value"] >= 600
    assert data["protection"]["text"] == "L2 DEGRADED"

    # The page shows the same numbers as text, in the same cells the script refreshes.
    page = c.get("/")
    assert page.status_code == 200
    tables = Tables(page.text).rows
    shown = {
        (r["attrs"]["data-queue"], r["attrs"]["data-task-type"]): r["cells"]
        for r in tables["t-types"]
    }
    for key, numbers in expected.items():
        for k, n in numbers.items():
            assert shown[key][k].strip() == str(n), (key, k)
    queues = {r["attrs"]["data-queue"]: r["cells"] for r in tables["t-queues"]}
    assert (queues["mail"]["running"], queues["mail"]["slots"]) == ("1", "4")
    assert (queues["sms"]["running"], queues["sms"]["slots"]) == ("3", "2")
    assert [r["attrs"]["data-name"] for r in tables["t-pauses"]] == ["sms.notify"]
    assert [r["attrs"]["data-task-type"] for r in tables["t-breakers"]] == ["mail.send"]
    assert "L2 DEGRADED" in page.text and "two types failing" in page.text

    # A new task shows up in the next poll: the JSON is read live, not cached.
    execute(dsn, "INSERT INTO taskq.tasks (queue, task_type) VALUES ('mail', 'mail.send')")
    again = c.get("/api/overview").json()
    cells = next(
        r["cells"] for r in again["tables"]["types"] if r["attrs"]["data-task-type"] == "mail.send"
    )
    assert next(c for c in cells if c["k"] == "runnable")["value"] == 5


# --- dead letters: filters, actions, the audit they write --------------------------------------


def seed_dead_letters(dsn: str) -> dict[str, int]:
    ids = {
        "old_timeout": dead(dsn, "mail.send", "SMTPError: TIMEOUT after 30s\n  File x", 30),
        "recent_bad": dead(dsn, "mail.send", "ValueError: bad address", 1),
        "sms_timeout": dead(dsn, "sms.notify", "Timeout: provider slow", 5),
        "percent": dead(dsn, "sms.notify", "KeyError: 100%_done", 0.5),
    }
    insert(dsn, task_type="'mail.send'", last_error="'timeout but still pending'")
    return ids


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["percent", "recent_bad", "sms_timeout", "old_timeout"]),
        ("task_type=mail.send", ["recent_bad", "old_timeout"]),
        ("error=timeout", ["sms_timeout", "old_timeout"]),  # substring, any case
        ("error=%25", ["percent"]),  # '%' is a character, not a wildcard
        ("error=0%25_d", ["percent"]),
        ("older_than=24", ["old_timeout"]),
        ("newer_than=2", ["percent", "recent_bad"]),
        ("older_than=2&newer_than=24", ["sms_timeout"]),
        ("task_type=sms.notify&error=TIMEOUT", ["sms_timeout"]),
        ("error=nothing+like+this", []),
    ],
)
def test_dead_letter_filters(dsn: str, query: str, expected: list[str]) -> None:
    ids = seed_dead_letters(dsn)
    page = client(dsn).get(f"/dlq?{query}")
    assert page.status_code == 200, page.text
    assert listed_ids(page.text) == [ids[name] for name in expected]
    assert f"{len(expected)} dead letter(s) match" in page.text


def test_a_bad_filter_is_one_clear_error(dsn: str) -> None:
    page = client(dsn).get("/dlq?older_than=soon")
    assert page.status_code == 400
    assert "older than must be a number of hours, got &#39;soon&#39;" in page.text


@pytest.mark.slow
def test_requeue_a_filtered_selection_then_discard_one_with_notes(dsn: str) -> None:
    ids = seed_dead_letters(dsn)
    c = client(dsn)

    confirm = c.get("/dlq/confirm?action=requeue&error=timeout")
    assert confirm.status_code == 200
    assert listed_ids(confirm.text, "confirm-table") == [ids["sms_timeout"], ids["old_timeout"]]
    hidden = re.search(r'name="ids" value="([0-9,]+)"', confirm.text)
    assert hidden is not None
    done = c.post(
        "/dlq/requeue",
        data={
            "csrf": csrf_of(confirm.text),
            "ids": hidden.group(1),
            "note": "provider fixed",
            "reset_retries": "on",
            "back": "/dlq?error=timeout",
        },
    )
    assert done.status_code == 303
    assert done.headers["location"] == "/dlq?error=timeout&done=requeued&n=2"
    assert "Requeued 2 dead letter(s)." in c.get(done.headers["location"]).text

    state = {r["id"]: r for r in rows(dsn, "SELECT id, status, retry_count FROM taskq.tasks")}
    for name in ("old_timeout", "sms_timeout"):
        assert (state[ids[name]]["status"], state[ids[name]]["retry_count"]) == ("PENDING", 0)
    for name in ("recent_bad", "percent"):
        assert state[ids[name]]["status"] == "DEAD_LETTER"
    audit = rows(
        dsn, "SELECT actor, action, task_id, note, detail FROM taskq.audit ORDER BY task_id"
    )
    assert [(a["action"], a["task_id"], a["note"]) for a in audit] == [
        ("dlq_requeue", ids["old_timeout"], "provider fixed"),
        ("dlq_requeue", ids["sms_timeout"], "provider fixed"),
    ]
    # The actor is the dashboard's login; the person it acts for is kept in detail.by.
    assert all(a["detail"]["by"].endswith(" via dashboard") for a in audit)
    assert audit[0]["detail"]["reset_retries"] is True

    one = c.get(f"/dlq/confirm?action=discard&ids={ids['recent_bad']}")
    gone = c.post(
        "/dlq/discard",
        data={"csrf": csrf_of(one.text), "ids": str(ids["recent_bad"]), "note": "spam"},
    )
    assert gone.status_code == 303 and gone.headers["location"] == "/dlq?done=discarded&n=1"
    assert count(dsn, f"id = {ids['recent_bad']}") == 0
    last = rows(dsn, "SELECT action, note, detail FROM taskq.audit ORDER BY id DESC LIMIT 1")[0]
    assert (last["action"], last["note"]) == ("dlq_discard", "spam")
    assert last["detail"]["last_error"] == "ValueError: bad address"  # the copy it keeps

    # All or nothing: one id that is not a dead letter, and nothing changes.
    pending = rows(dsn, "SELECT id FROM taskq.tasks WHERE status = 'PENDING' LIMIT 1")[0]["id"]
    refused = c.post(
        "/dlq/requeue",
        data={"csrf": csrf_of(one.text), "ids": f"{ids['percent']},{pending}"},
    )
    assert refused.status_code == 404
    assert f"{pending} (PENDING)" in refused.text and "nothing changed" in refused.text
    assert status_and_payload(dsn, ids["percent"])[0] == "DEAD_LETTER"


def test_requeue_with_an_edited_payload_records_old_and_new(dsn: str) -> None:
    task = dead(dsn, "sms.notify", "ValueError: bad number", 1, payload={"to": "+49 bad"})
    c = client(dsn, max_payload_bytes=200)
    page = c.get(f"/tasks/{task}")
    assert page.status_code == 200
    assert "&#34;to&#34;: &#34;+49 bad&#34;" in page.text  # pretty-printed, in the textarea too
    csrf = csrf_of(page.text)

    def post(payload: str, **extra: str) -> Any:
        return c.post(
            f"/tasks/{task}/requeue-edited", data={"csrf": csrf, "payload": payload, **extra}
        )

    for bad, message in [
        ('{"to": ', "the payload is not valid JSON"),
        ('{"n": NaN}', "NaN is not JSON"),
        (json.dumps({"x": "y" * 300}), "the limit is 200 bytes"),
        ('{"x": "\\u0000"}', "NUL character"),  # refused before it reaches the database
    ]:
        refused = post(bad)
        assert refused.status_code == 400, bad
        assert message in refused.text, (bad, refused.text)
        assert 'id="edit-form"' in refused.text  # the operator's text is kept to fix
    assert status_and_payload(dsn, task) == ("DEAD_LETTER", {"to": "+49 bad"})
    assert count_audit(dsn) == 0

    done = post('{"to": "+4912345",\n "n": 1}', note="fixed the number", reset_retries="on")
    assert done.status_code == 303, done.text
    assert status_and_payload(dsn, task) == ("PENDING", {"to": "+4912345", "n": 1})
    assert rows(dsn, f"SELECT retry_count FROM taskq.tasks WHERE id = {task}")[0][
        "retry_count"
    ] == (0)
    [audit] = rows(dsn, "SELECT actor, action, task_id, note, detail FROM taskq.audit")
    assert (audit["action"], audit["task_id"], audit["note"]) == (
        "dlq_requeue_edited",
        task,
        "fixed the number",
    )
    assert audit["detail"]["by"].endswith(" via dashboard")
    assert audit["detail"]["old_payload"] == {"to": "+49 bad"}
    assert audit["detail"]["new_payload"] == {"to": "+4912345", "n": 1}
    assert audit["detail"]["last_error"] == "ValueError: bad number"

    # Guarded by status: it is not a dead letter any more, so nothing changes.
    again = post('{"to": "other"}')
    assert again.status_code == 400
    assert f"task {task} is not a dead letter (PENDING), nothing changed" in again.text
    assert status_and_payload(dsn, task) == ("PENDING", {"to": "+4912345", "n": 1})
    assert count_audit(dsn) == 1


def status_and_payload(dsn: str, task_id: int) -> tuple[str, Any]:
    row = rows(dsn, f"SELECT status, payload FROM taskq.tasks WHERE id = {task_id}")[0]
    return row["status"], row["payload"]


def count_audit(dsn: str) -> int:
    return int(rows(dsn, "SELECT count(*) AS n FROM taskq.audit")[0]["n"])


# --- pauses, the circuit, the audit page -------------------------------------------------------


@pytest.mark.slow
def test_pause_resume_circuit_and_level_are_audited(dsn: str) -> None:
    c = client(dsn)
    csrf = csrf_of(c.get("/controls").text)

    def post(path: str, **data: str) -> str:
        response = c.post(path, data={"csrf": csrf, **data})
        assert response.status_code == 303, response.text
        return str(response.headers["location"])

    where = post("/controls/pause", kind="task_type", name="mail.send", note="SMTP down")
    assert where == "/controls?done=paused"
    assert post("/controls/pause", kind="task_type", name="mail.send").endswith("already_paused")
    post("/controls/pause", kind="queue", name="sms")
    paused = rows(dsn, "SELECT kind, name, paused_by, note FROM taskq.pauses ORDER BY kind")
    assert [(p["kind"], p["name"], p["note"]) for p in paused] == [
        ("queue", "sms", None),
        ("task_type", "mail.send", "SMTP down"),
    ]
    assert all(p["paused_by"].endswith(" via dashboard") for p in paused)
    page = c.get("/controls").text
    assert [
        (r["attrs"]["data-kind"], r["attrs"]["data-name"])
        for r in Tables(page).rows["pauses-table"]
    ] == [("queue", "sms"), ("task_type", "mail.send")]

    assert post("/controls/resume", kind="queue", name="sms") == "/controls?done=resumed"
    assert [p["name"] for p in rows(dsn, "SELECT name FROM taskq.pauses")] == ["mail.send"]

    execute(
        dsn,
        "INSERT INTO taskq.breakers (task_type, state, opened_at) VALUES ('mail.send', 'OPEN', "
        "now()), ('sms.notify', 'OPEN', now())",
    )
    assert post("/controls/circuit-reset", task_type="mail.send") == "/controls?done=reset&n=1"
    states = {r["task_type"]: r["state"] for r in rows(dsn, "SELECT * FROM taskq.breakers")}
    assert states == {"mail.send": "CLOSED", "sms.notify": "OPEN"}
    assert post("/controls/level", level="4", note="incident") == "/controls?done=level"
    assert rows(dsn, "SELECT level FROM taskq.protection")[0]["level"] == 4
    assert "L4 EMERGENCY" in c.get("/controls").text
    # Everything: both breakers (one was closed already) and the level.
    assert post("/controls/circuit-reset", note="all clear") == "/controls?done=reset&n=2"
    assert rows(dsn, "SELECT level FROM taskq.protection")[0]["level"] == 0
    assert {r["state"] for r in rows(dsn, "SELECT state FROM taskq.breakers")} == {"CLOSED"}

    actions = [r["action"] for r in rows(dsn, "SELECT action FROM taskq.audit ORDER BY id")]
    assert actions == [
        "pause",
        "pause",
        "resume",
        "breaker_reset",
        "protection_level",
        "breaker_reset",
        "breaker_reset",
        "protection_level",
    ]

    bad = c.post("/controls/pause", data={"csrf": csrf, "kind": "table", "name": "x"})
    assert bad.status_code == 400 and "kind must be task_type or queue" in bad.text
    blank = c.post("/controls/pause", data={"csrf": csrf, "kind": "queue", "name": " sms"})
    assert blank.status_code == 400 and "leading or trailing blanks" in blank.text


@pytest.mark.slow
def test_audit_page_lists_the_latest_rows_and_filters(dsn: str) -> None:
    task = dead(dsn, "mail.send", "Boom", 1)
    execute(
        dsn,
        f"""
        INSERT INTO taskq.audit (actor, action, task_id, task_type, note) VALUES
            ('a@h', 'pause', NULL, 'mail.send', 'first'),
            ('b@h', 'dlq_requeue', {task}, 'mail.send', 'second'),
            ('c@h', 'resume', NULL, 'sms.notify', 'third');
        """,
    )
    c = client(dsn)

    def notes(query: str) -> list[str]:
        page = c.get(f"/audit?{query}")
        assert page.status_code == 200, page.text
        found = Tables(page.text).rows.get("audit-table", [])
        return [r["attrs"]["data-action"] for r in found]

    assert notes("") == ["resume", "dlq_requeue", "pause"]  # newest first
    assert notes("action=pause") == ["pause"]
    assert notes(f"task_id={task}") == ["dlq_requeue"]
    assert notes("task_type=mail.send") == ["dlq_requeue", "pause"]
    assert notes("action=resume&task_type=mail.send") == []
    assert c.get("/audit?action=drop_table").status_code == 400

    # A task's own page shows its history.
    page = c.get(f"/tasks/{task}").text
    assert "second" in page and "b@h" in page


# --- the task page and its live progress --------------------------------------------------------


def test_task_page_shows_row_children_and_progress(dsn: str) -> None:
    parent = insert(
        dsn,
        task_type="'report.build'",
        status="'PROCESSING'",
        started_at="now()",
        effective_id="gen_random_uuid()",
        worker_id="'w1'",
        retry_count=1,
        max_retry_count=5,
        progress="""'{"percent": 25, "message": "step 1 of 4"}'""",
        payload="""'{"month": "2024-05"}'""",
    )
    child = insert(dsn, task_type="'report.part'", parent_id=parent)
    grandchild = insert(dsn, task_type="'report.page'", parent_id=child, status="'SUCCESS'")
    page = client(dsn).get(f"/tasks/{parent}")
    assert page.status_code == 200
    assert f'data-live="/tasks/{parent}/events"' in page.text  # not final: the page follows it
    assert 'value="25"' in page.text and "step 1 of 4" in page.text
    assert 'id="task-attempts">1/5<' in page.text
    assert re.search(rf'data-task-id="{child}">\s*<a href="/tasks/{child}"', page.text)
    assert re.search(rf'class="depth-2" data-task-id="{grandchild}"', page.text)
    assert "&#34;month&#34;: &#34;2024-05&#34;" in page.text

    finished = client(dsn).get(f"/tasks/{grandchild}")
    assert "data-live" not in finished.text  # a final task is not followed
    assert client(dsn).get("/tasks/999999").status_code == 404


def events_of(body: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


@pytest.mark.slow
def test_progress_stream_follows_notify_and_ends_on_the_final_status(dsn: str) -> None:
    task = insert(
        dsn,
        task_type="'report.build'",
        status="'PROCESSING'",
        started_at="now()",
        effective_id="gen_random_uuid()",
        worker_id="'w1'",
        max_retry_count=5,
        progress="""'{"percent": 25, "message": "step 1"}'""",
    )
    c = client(dsn)
    with ThreadPoolExecutor(1) as pool:
        stream = pool.submit(c.get, f"/tasks/{task}/events")
        # The stream has LISTENed once its connection has read the row (LISTEN comes first).
        wait_until_sync(
            lambda: bool(
                rows(
                    dsn,
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name LIKE 'taskq-dashboard-progress-%%' "
                    "AND query LIKE '%%FROM taskq.tasks%%'",
                )
            ),
            timeout=10,
            what="the progress stream to listen",
        )
        other = json.dumps({"id": task + 1000, "progress": {"percent": 99, "message": "other"}})
        mine = json.dumps({"id": task, "progress": {"percent": 60, "message": "step 3"}})
        execute(dsn, f"SELECT pg_notify('taskq_progress', '{other}')")
        execute(dsn, f"SELECT pg_notify('taskq_progress', '{mine}')")
        time.sleep(0.3)  # let the stream pass the progress on before the task finishes
        final = json.dumps({"id": task, "status": "SUCCESS", "progress": {"percent": 100}})
        execute(
            dsn,
            f"""UPDATE taskq.tasks SET status = 'SUCCESS', finished_at = now(),
                progress = '{{"percent": 100}}' WHERE id = {task};
                SELECT pg_notify('taskq_progress', '{final}')""",
        )
        response = stream.result(timeout=15)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    got = events_of(response.text)
    assert got[0] == (
        "state",
        {
            "id": task,
            "status": "PROCESSING",
            "percent": 25,
            "message": "step 1",
            "retry_count": 0,
            "max_retry_count": 5,
        },
    )
    progress = [data for event, data in got if event == "progress"]
    assert progress[0]["percent"] == 60 and progress[0]["message"] == "step 3"
    assert all(data["message"] != "other" for _, data in got)  # another task's progress
    assert got[-1][0] == "final" and got[-1][1]["status"] == "SUCCESS"


def test_progress_stream_of_a_missing_or_finished_task_ends_at_once(dsn: str) -> None:
    c = client(dsn)
    assert events_of(c.get("/tasks/424242/events").text) == [("gone", {"id": 424242})]
    done = dead(dsn, "mail.send", "Boom", 1)
    [(event, data)] = events_of(c.get(f"/tasks/{done}/events").text)
    assert (event, data["status"]) == ("final", "DEAD_LETTER")


# --- security --------------------------------------------------------------------------------


def test_posts_need_the_csrf_token(dsn: str) -> None:
    task = dead(dsn, "mail.send", "Boom", 1)
    c = client(dsn)
    page = c.get(f"/dlq/confirm?action=requeue&ids={task}").text
    other_process = client(dsn).app.state.dashboard.keys.csrf(Auth("open"))
    for data in (
        {"ids": str(task)},
        {"ids": str(task), "csrf": "0" * 64},
        {"ids": str(task), "csrf": other_process},
    ):
        refused = c.post("/dlq/requeue", data=data)
        assert refused.status_code == 403, data
        assert "CSRF" in refused.text
    # A Bearer header proves nothing when no token is configured: still refused.
    forged = c.post(
        "/controls/pause",
        data={"kind": "queue", "name": "q"},
        headers={"Authorization": "Bearer anything"},
    )
    assert forged.status_code == 403
    assert c.get("/dlq/requeue").status_code == 405  # state changes are never GETs
    assert c.get("/controls/pause").status_code == 405
    assert status_and_payload(dsn, task)[0] == "DEAD_LETTER"
    assert count_audit(dsn) == 0 and not rows(dsn, "SELECT 1 FROM taskq.pauses")

    ok = c.post("/dlq/requeue", data={"ids": str(task), "csrf": csrf_of(page)})
    assert ok.status_code == 303
    assert status_and_payload(dsn, task)[0] == "PENDING"


@pytest.mark.slow
def test_read_only_hides_the_forms_and_refuses_every_post(dsn: str) -> None:
    task = dead(dsn, "mail.send", "Boom", 1)
    c = client(dsn, read_only=True)
    for path in ("/", "/dlq", f"/tasks/{task}", "/controls", "/audit"):
        page = c.get(path)
        assert page.status_code == 200, path
        assert 'method="post"' not in page.text, path
        assert "read-only" in page.text
    preview = c.get(f"/dlq/confirm?action=discard&ids={task}")
    assert preview.status_code == 200 and 'method="post"' not in preview.text
    csrf = c.app.state.dashboard.keys.csrf(Auth("open"))
    for path, data in [
        ("/dlq/requeue", {"ids": str(task)}),
        ("/dlq/discard", {"ids": str(task)}),
        (f"/tasks/{task}/requeue-edited", {"payload": "{}"}),
        ("/controls/pause", {"kind": "queue", "name": "q"}),
        ("/controls/level", {"level": "4"}),
        ("/controls/circuit-reset", {}),
    ]:
        refused = c.post(path, data={"csrf": csrf, **data})
        assert refused.status_code == 403, path
        assert "read-only" in refused.text
    assert status_and_payload(dsn, task)[0] == "DEAD_LETTER"
    assert count_audit(dsn) == 0 and not rows(dsn, "SELECT 1 FROM taskq.pauses")
    assert rows(dsn, "SELECT level FROM taskq.protection")[0]["level"] == 0


def test_user_text_is_escaped_everywhere(dsn: str) -> None:
    task = insert(
        dsn,
        task_type=f"'{XSS}'",
        queue="'<img src=x onerror=alert(2)>'",
        status="'DEAD_LETTER'",
        finished_at="now()",
        payload=f"""'{json.dumps({"html": XSS})}'""",
        last_error=f"'Boom: {XSS}'",
        biz_id=f"'{XSS}'",
    )
    c = client(dsn)
    csrf = csrf_of(c.get("/controls").text)
    c.post("/controls/pause", data={"csrf": csrf, "kind": "task_type", "name": XSS, "note": XSS})
    c.post("/dlq/requeue", data={"csrf": csrf, "ids": str(task), "note": XSS})
    execute(dsn, f"UPDATE taskq.tasks SET status = 'DEAD_LETTER' WHERE id = {task}")
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for path in (
        "/",
        "/dlq",
        f"/dlq?task_type={XSS}",
        f"/tasks/{task}",
        f"/dlq/confirm?action=requeue&ids={task}",
        "/controls",
        "/audit",
    ):
        page = c.get(path)
        assert page.status_code == 200, path
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert escaped in page.text, path
    # JSON is JSON (the page's script places it with textContent).
    api = c.get("/api/overview")
    assert api.headers["content-type"] == "application/json"
    assert XSS in {cell["text"] for r in api.json()["tables"]["types"] for cell in r["cells"]}


@pytest.mark.slow
def test_security_headers_on_every_response(dsn: str) -> None:
    c = client(dsn)
    responses = [
        c.get("/"),
        c.get("/api/overview"),
        c.get("/static/dashboard.js"),
        c.get("/no/such/page"),
        c.post("/dlq/requeue", data={"ids": "1"}),
    ]
    for r in responses:
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, r.url
        assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["x-content-type-options"] == "nosniff"
    assert responses[0].headers["cache-control"] == "no-store"
    # The policy can be that strict because the pages have no inline script, style or handler.
    for template in (ROOT / "taskq" / "dashboard" / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), template.name
        assert not re.search(r"\sstyle=|<style|\son[a-z]+=", text), template.name


@pytest.mark.slow
def test_without_a_token_only_loopback_host_names_are_answered(dsn: str) -> None:
    """A page on another site that re-points its name at 127.0.0.1 (DNS rebinding) would be
    same-origin with the dashboard; the Host header gives it away."""
    assert client(dsn, base_url="http://rebind.example:8080").get("/").status_code == 403
    for base in ("http://localhost:8080", "http://127.0.0.1:8080", "http://[::1]:8080"):
        assert client(dsn, base_url=base).get("/").status_code == 200, base


@pytest.mark.slow
def test_a_token_is_required_for_everything_but_the_login_form(dsn: str) -> None:
    c = client(dsn, auth_token=TOKEN, base_url="http://127.0.0.1:8080")
    html = {"Accept": "text/html"}
    assert c.get("/", headers=html).headers["location"] == "/login?next=/"
    for path in ("/api/overview", "/dlq", "/tasks/1/events", "/audit"):
        refused = c.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"] == "Bearer"
    assert c.get("/static/dashboard.css").status_code == 200
    assert c.get("/login").status_code == 200
    assert c.get("/", headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200

    wrong = c.post("/login", data={"token": "nope", "next": "/dlq"})
    assert wrong.status_code == 401 and "wrong token" in wrong.text
    assert "set-cookie" not in wrong.headers
    # Only a local path is a place to go back to (no open redirect).
    evil = c.post("/login", data={"token": TOKEN, "next": "//evil.example/x"})
    assert evil.headers["location"] == "/"
    login = c.post("/login", data={"token": TOKEN, "next": "/dlq"})
    assert login.status_code == 303 and login.headers["location"] == "/dlq"
    cookie = login.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=strict", "Secure", "Path=/", "Max-Age=43200"):
        assert attribute.lower() in cookie.lower(), (attribute, cookie)

    # The cookie (the client keeps it) opens the pages; actions still need the CSRF token.
    c.cookies.set("taskq_session", login.cookies["taskq_session"])
    page = c.get("/controls")
    assert page.status_code == 200 and "Log out" in page.text
    assert c.post("/controls/pause", data={"kind": "queue", "name": "q"}).status_code == 403
    ok = c.post("/controls/pause", data={"kind": "queue", "name": "q", "csrf": csrf_of(page.text)})
    assert ok.status_code == 303
    assert [r["name"] for r in rows(dsn, "SELECT name FROM taskq.pauses")] == ["q"]

    # A tampered cookie, or one minted by another process, is no session.
    value = login.cookies["taskq_session"]
    other = client(dsn, auth_token=TOKEN).app.state.dashboard.keys.new_session()
    for forged in (value[:-1] + ("0" if value[-1] != "0" else "1"), other):
        c.cookies.set("taskq_session", forged)
        assert c.get("/api/overview").status_code == 401

    # Scripts use the header; it is not something a browser adds by itself, so no CSRF token.
    bearer = client(dsn, auth_token=TOKEN, base_url="http://dashboard.example")
    resumed = bearer.post(
        "/controls/resume",
        data={"kind": "queue", "name": "q"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert resumed.status_code == 303
    assert not rows(dsn, "SELECT 1 FROM taskq.pauses")

    c.cookies.set("taskq_session", value)
    out = c.post("/logout", data={"csrf": csrf_of(page.text)})
    assert out.headers["location"] == "/login"
    assert "max-age=0" in out.headers["set-cookie"].lower()


# --- the command -------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TASKQ_DASHBOARD_TOKEN"}


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--host", "0.0.0.0"],
            "taskq: error: refusing to serve the dashboard on 0.0.0.0 without --auth-token",
        ),
        (["--host", "dashboard.example.com"], "without --auth-token"),
        (["--auth-token", "short"], "must be at least 32 random characters"),
        (["--auth-token", "a" * 40], "must be at least 32 random characters"),
        (["--auth-token", "ab" * 20], "must be at least 32 random characters"),
    ],
)
def test_the_command_refuses_an_unprotected_public_dashboard(
    dsn: str, args: list[str], message: str
) -> None:
    port = free_port()
    result = subprocess.run(
        [*taskq_command(), "dashboard", "--port", str(port), "--dsn", dsn, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no traceback
    assert not listening(port)


@pytest.mark.slow
def test_a_port_in_use_is_one_line_and_exit_1(dsn: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = taskq_cli("dashboard", "--port", str(port), "--dsn", dsn, env=_env())
    assert result.returncode == 1  # not 3, which means "database unavailable"
    assert result.stderr.strip() == f"taskq: error: cannot listen on 127.0.0.1:{port}: " + (
        "Address already in use"
    )


@pytest.mark.slow
def test_the_command_serves_with_a_token_on_all_interfaces(dsn: str, tmp_path: Path) -> None:
    """The docker-compose setup: 0.0.0.0 with a token; the token opens it, nothing else."""
    port = free_port()
    log = (tmp_path / "dashboard.log").open("w")
    proc = subprocess.Popen(
        [*taskq_command(), "dashboard", "--host", "0.0.0.0", "--port", str(port), "--dsn", dsn],
        env={**_env(), "TASKQ_DASHBOARD_TOKEN": TOKEN},
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    try:
        wait_until_sync(lambda: listening(port) or proc.poll() is not None, timeout=20)
        assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
        url = f"http://127.0.0.1:{port}/api/overview"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        assert refused.value.code == 401
        refused.value.close()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.load(response)["protection"]["text"] == "L0 NORMAL"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    assert "taskq dashboard on http://0.0.0.0:" in (tmp_path / "dashboard.log").read_text()


@pytest.mark.slow
def test_the_command_fails_in_one_line_without_the_schema(empty_dsn: str) -> None:
    result = taskq_cli("dashboard", "--port", str(free_port()), "--dsn", empty_dsn, env=_env())
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "run `taskq migrate`" in result.stderr


# --- least privilege ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_dashboard_works_as_the_operator_role(dsn: str) -> None:
    """docker-compose runs the dashboard as a member of taskq_operator: every page and action
    must work with that role's grants alone (roles.sql)."""
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from taskq.db import migrate

    migrate.apply_roles(dsn)
    user = f"taskq_test_dash_{os.getpid()}"
    execute(dsn, f"CREATE ROLE {user} LOGIN IN ROLE taskq_operator")
    try:
        operator = make_conninfo(dsn, user=user)
        task = dead(dsn, "mail.send", "Boom", 1)
        finished = dead(dsn, "mail.send", "Boom", 1)
        c = client(operator)
        for path in ("/", "/api/overview", "/dlq?error=boom", f"/tasks/{task}", "/audit"):
            assert c.get(path).status_code == 200, path
        page = c.get("/controls")
        assert page.status_code == 200
        csrf = csrf_of(page.text)
        for path, data in [
            (f"/tasks/{task}/requeue-edited", {"payload": '{"fixed": true}'}),
            ("/dlq/discard", {"ids": str(finished)}),
            ("/controls/pause", {"kind": "queue", "name": "mail"}),
            ("/controls/resume", {"kind": "queue", "name": "mail"}),
            ("/controls/level", {"level": "1"}),
            ("/controls/circuit-reset", {}),
        ]:
            done = c.post(path, data={"csrf": csrf, **data})
            assert done.status_code == 303, (path, done.text)
        assert status_and_payload(dsn, task) == ("PENDING", {"fixed": True})
        assert [e for e, _ in events_of(c.get(f"/tasks/{task + 99}/events").text)] == ["gone"]
        assert count_audit(dsn) == 6
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (user,),
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(user)))


def test_task_page_cuts_a_big_payload_short_unless_full(dsn: str) -> None:
    big = insert(
        dsn,
        task_type="'big.one'",
        status="'DEAD_LETTER'",
        finished_at="now()",
        payload="jsonb_build_object('blob', repeat('x', 3000000))",
    )
    page = client(dsn).get(f"/tasks/{big}")
    assert page.status_code == 200
    assert len(page.text) < 200_000 and 'id="payload-cut"' in page.text
    assert 'id="edit-form"' not in page.text  # never a truncated payload to save back
    whole = client(dsn).get(f"/tasks/{big}?full=1")
    assert "x" * 3_000_000 in whole.text and 'id="edit-form"' in whole.text


def test_token_file_is_generated_once_and_read_back(tmp_path: Path) -> None:
    from taskq.dashboard.security import check_token, token_from_file

    path = tmp_path / "token"
    token, generated = token_from_file(path)
    assert generated and (path.stat().st_mode & 0o777) == 0o600
    check_token(token)  # a generated token passes the strength check
    assert token_from_file(path) == (token, False)


def test_overview_lists_blocked_ordering_keys(dsn: str) -> None:
    head = insert(
        dsn,
        task_type="'nobody.runs'",
        queue="'default'",
        ordering_key="'acct-7'",
        scheduled_at="now() - interval '10 minutes'",
    )
    insert(dsn, task_type="'sms.notify'", queue="'sms'", ordering_key="'acct-7'")
    c = client(dsn)
    [row] = c.get("/api/overview").json()["tables"]["blocked"]
    assert row["attrs"] == {"data-ordering-key": "acct-7"}
    cells = {cell["k"]: cell for cell in row["cells"]}
    assert cells["head"]["href"] == f"/tasks/{head}"
    assert cells["why"]["text"] == "no worker has registered this type"
    assert 'data-ordering-key="acct-7"' in c.get("/").text
