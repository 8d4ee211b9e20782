"""Task control in the dashboard over HTTP: cancel and abort from the task page, the dead-letter
handling record (state and group filters, assign, resolve), error groups and the report, and
business switches next to the pauses."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from taskq.dashboard.security import Auth
from tests.integration.test_dashboard import XSS, Tables, client, csrf_of, dead, insert
from tests.support import rows


def _state(dsn: str, task_id: int) -> str:
    return str(rows(dsn, "SELECT status FROM taskq.tasks WHERE id = %s", [task_id])[0]["status"])


def test_cancel_a_pending_task_and_abort_a_running_one(dsn: str) -> None:
    pending = insert(dsn, task_type="'sms.send'")
    running = insert(
        dsn,
        task_type="'sms.send'",
        status="'PROCESSING'",
        effective_id="gen_random_uuid()",
        worker_id="'w-1'",
        started_at="now()",
    )
    done = insert(dsn, task_type="'sms.send'", status="'SUCCESS'", finished_at="now()")
    c = client(dsn)
    page = c.get(f"/tasks/{pending}")
    assert 'id="cancel-form"' in page.text
    assert 'id="cancel-form"' not in c.get(f"/tasks/{done}").text
    csrf = csrf_of(page.text)
    moved = c.post(f"/tasks/{pending}/cancel", data={"csrf": csrf, "note": "withdrawn"})
    assert moved.status_code == 303
    assert moved.headers["location"] == f"/tasks/{pending}?done=cancelled"
    assert _state(dsn, pending) == "CANCELLED"
    shown = c.get(moved.headers["location"]).text
    assert "Cancelled." in shown and "s-cancelled" in shown

    with psycopg.connect(dsn, autocommit=True) as listen:
        listen.execute("LISTEN taskq_abort")
        asked = c.post(f"/tasks/{running}/cancel", data={"csrf": csrf})
        assert asked.headers["location"] == f"/tasks/{running}?done=abort_requested"
        [note] = list(listen.notifies(timeout=2, stop_after=1))
        assert f'"id" : {running}' in note.payload and '"w-1"' in note.payload
    assert _state(dsn, running) == "PROCESSING"
    assert 'id="task-abort"' in c.get(f"/tasks/{running}").text

    refused = c.post(f"/tasks/{done}/cancel", data={"csrf": csrf})
    assert refused.status_code in (400, 404) and f"{done} (SUCCESS)" in refused.text
    audit = rows(dsn, "SELECT action, task_id, note, detail FROM taskq.audit ORDER BY id")
    assert [(a["action"], a["task_id"], a["note"]) for a in audit] == [
        ("cancel", pending, "withdrawn"),
        ("abort_requested", running, None),
    ]
    assert all(a["detail"]["by"].endswith(" via dashboard") for a in audit)


def test_dead_letter_handling_groups_and_report(dsn: str) -> None:
    timeouts = [dead(dsn, "sms.send", f"HTTPError: 503 for order {i}", 2) for i in range(4)]
    typos = [dead(dsn, "mail.send", f"KeyError: 'user-{i}'", 1) for i in range(2)]
    c = client(dsn)
    groups = Tables(c.get("/dlq/groups").text).rows["groups-table"]
    assert [(g["cells"]["total"], g["cells"]["new"]) for g in groups] == [("4", "4"), ("2", "2")]
    sms, mail = (g["attrs"]["data-group"] for g in groups)

    page = c.get(f"/dlq?group={sms}")
    listed = [int(r["attrs"]["data-task-id"]) for r in Tables(page.text).rows["dlq-table"]]
    assert sorted(listed) == timeouts
    shown = re.search(r'id="assign-form".*?name="ids" value="([0-9,]+)"', page.text, re.S)
    assert shown is not None
    assigned = c.post(
        "/dlq/handle",
        data={
            "csrf": csrf_of(page.text),
            "what": "assign",
            "ids": shown.group(1),
            "to": "ana",
            "note": "looking",
            "back": f"/dlq?group={sms}",
        },
    )
    assert assigned.headers["location"] == f"/dlq?group={sms}&done=assigned&n=4"
    assert "Assigned 4 dead letter(s)." in c.get(assigned.headers["location"]).text
    resolved = c.post(
        "/dlq/handle",
        data={
            "csrf": csrf_of(page.text),
            "what": "resolve",
            "ids": ",".join(map(str, typos)),
            "resolution": "ignored",
            "note": "test data",
        },
    )
    assert resolved.headers["location"] == "/dlq?done=resolved&n=2"
    new = Tables(c.get("/dlq?state=new").text).rows.get("dlq-table", [])
    assert [r for r in new if "data-task-id" in r["attrs"]] == []
    investigating = c.get("/dlq?state=investigating").text
    assert investigating.count('data-state="investigating"') == 4 and "(ana)" in investigating

    report = Tables(c.get("/dlq/groups?since=12").text).rows
    assert {r["attrs"]["data-group"] for r in report["report-new"]} == {sms, mail}
    assert [
        (r["attrs"]["data-group"], r["attrs"]["data-state"]) for r in report["report-open"]
    ] == [(sms, "investigating")]
    # Requeue a whole group from its confirm page.
    confirm = c.get(f"/dlq/confirm?action=requeue&group={sms}")
    ids = re.search(r'name="ids" value="([0-9,]+)"', confirm.text)
    assert ids is not None and sorted(map(int, ids.group(1).split(","))) == timeouts
    c.post("/dlq/requeue", data={"csrf": csrf_of(confirm.text), "ids": ids.group(1)})
    assert {_state(dsn, t) for t in timeouts} == {"PENDING"}
    resolutions = rows(dsn, "SELECT resolution, count(*) AS n FROM taskq.dead_letters GROUP BY 1")
    assert sorted((r["resolution"], r["n"]) for r in resolutions) == [
        ("ignored", 2),
        ("requeued", 4),
    ]
    bad = c.get("/dlq?group=nothex")
    assert bad.status_code == 400 and "12 hex characters" in bad.text


def test_business_switches_next_to_the_pauses(dsn: str) -> None:
    c = client(dsn)
    page = c.get("/controls")
    assert "no switch has been set" in page.text
    with psycopg.connect(dsn, autocommit=True) as listen:
        listen.execute("LISTEN taskq_control")
        done = c.post(
            "/controls/switch-set",
            data={"csrf": csrf_of(page.text), "name": "sms.sending", "value": "off", "note": XSS},
        )
        assert done.headers["location"] == "/controls?done=switched"
        assert [n.payload for n in listen.notifies(timeout=2, stop_after=1)] == ["switches"]
    shown = c.get("/controls").text
    assert 'data-switch="sms.sending" data-enabled="off"' in shown
    assert "<script>alert" not in shown and "&lt;script&gt;" in shown
    again = c.post(
        "/controls/switch-set",
        data={"csrf": csrf_of(shown), "name": "sms.sending", "value": "off"},
    )
    assert again.headers["location"] == "/controls?done=switch_unchanged"
    audit = rows(dsn, "SELECT action, detail FROM taskq.audit ORDER BY id")
    assert [(a["action"], a["detail"]["enabled"]) for a in audit] == [("switch_set", False)] * 2


def test_read_only_refuses_the_new_actions(dsn: str) -> None:
    task = insert(dsn, task_type="'sms.send'")
    gone = dead(dsn, "mail.send", "Boom", 1)
    c = client(dsn, read_only=True)
    for path in (f"/tasks/{task}", "/dlq", "/dlq/groups", "/controls"):
        page = c.get(path)
        assert page.status_code == 200 and 'method="post"' not in page.text, path
    csrf = c.app.state.dashboard.keys.csrf(Auth("open"))
    posts: list[tuple[str, dict[str, Any]]] = [
        (f"/tasks/{task}/cancel", {}),
        ("/dlq/handle", {"what": "assign", "ids": str(gone), "to": "x"}),
        ("/controls/switch-set", {"name": "a", "value": "off"}),
    ]
    for path, data in posts:
        assert c.post(path, data={"csrf": csrf, **data}).status_code == 403, path
    assert _state(dsn, task) == "PENDING"
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.audit")[0]["n"] == 0
