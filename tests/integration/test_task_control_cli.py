"""Task control as an operator runs it: `taskq cancel`, `taskq switch`, and the dead-letter
workflow (groups, assign, resolve, report, filtered and throttled requeue, Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

import psycopg

import taskq
from tests.support import ROOT, rows, status_of, taskq_cli, taskq_command


def _dead(dsn: str, n: int, task_type: str, error: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, status, retry_count, max_retry_count,"
            " last_error, finished_at, biz_id)"
            " SELECT %s, 'DEAD_LETTER', 5, 5, replace(%s, '{i}', i::text),"
            " now() - interval '1 hour', 'order-' || i FROM generate_series(1, %s) AS i",
            [task_type, error, n],
        )


def _json(*args: str) -> Any:
    result = taskq_cli(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cancel_from_the_command_line(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        a = app.enqueue(conn, "sms.send", {}, biz_id="order-1")
        b = app.enqueue(conn, "sms.send", {}, biz_id="order-2")
        c = app.enqueue(conn, "mail.send", {}, biz_id="order-1")
        done = app.enqueue(conn, "mail.send", {})
        conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE id = %s", [done])
    dry = _json("cancel", "--task-type", "sms.send", "--dry-run", "--dsn", dsn)
    assert dry["cancelled"] == [a, b] and status_of(dsn, a)["status"] == "PENDING"
    refused = taskq_cli("cancel", str(c), str(done), "--dsn", dsn)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"taskq: error: cannot cancel, nothing changed: {done} (SUCCESS)"
    )
    assert status_of(dsn, c)["status"] == "PENDING"
    by_key = taskq_cli("cancel", "--biz-id", "order-1", "--note", "order withdrawn", "--dsn", dsn)
    assert by_key.returncode == 0 and "cancel 2 task(s)" in by_key.stdout, by_key
    assert {status_of(dsn, i)["status"] for i in (a, c)} == {"CANCELLED"}
    assert status_of(dsn, b)["status"] == "PENDING"
    audit = rows(dsn, "SELECT action, note, detail->>'by' AS by FROM taskq.audit ORDER BY id")
    assert [(x["action"], x["note"]) for x in audit] == [("cancel", "order withdrawn")] * 2
    assert "@" in audit[0]["by"]
    bad = taskq_cli("cancel", "--dsn", dsn)
    assert bad.returncode == 1 and "say which tasks" in bad.stderr


def test_switch_set_and_list(dsn: str) -> None:
    off = taskq_cli(
        "switch", "set", "sms.sending", "off", "--note", "provider incident", "--dsn", dsn
    )
    assert off.returncode == 0 and "switch sms.sending is now off" in off.stdout
    again = taskq_cli("switch", "set", "sms.sending", "off", "--dsn", dsn)
    assert "was already off" in again.stdout
    listed = _json("switch", "list", "--dsn", dsn)
    assert [(s["name"], s["enabled"]) for s in listed] == [("sms.sending", False)]
    human = taskq_cli("switch", "list", "--dsn", dsn)
    assert "sms.sending" in human.stdout and "off" in human.stdout
    stats = taskq_cli("stats", "--dsn", dsn)
    assert "switch off sms.sending" in stats.stdout


def test_dead_letter_workflow_groups_requeue_group_report(dsn: str) -> None:
    _dead(dsn, 250, "sms.send", "HTTPError: 503 for order {i}\nTraceback ...")
    _dead(dsn, 200, "mail.send", "KeyError: 'customer-{i}'")
    _dead(dsn, 50, "sync.push", "ValueError: bad amount {i}")
    groups = _json("dlq", "groups", "--dsn", dsn)
    assert [(g["total"], g["task_types"]) for g in groups] == [
        (250, ["sms.send"]),
        (200, ["mail.send"]),
        (50, ["sync.push"]),
    ]
    human = taskq_cli("dlq", "groups", "--dsn", dsn)
    assert human.returncode == 0 and groups[0]["fingerprint"] in human.stdout
    sms, mail, sync = (g["fingerprint"] for g in groups)

    requeued = _json("dlq", "requeue", "--group", sms, "--note", "provider back", "--dsn", dsn)
    assert requeued["count"] == 250
    statuses = rows(
        dsn, "SELECT task_type, status, count(*) AS n FROM taskq.tasks GROUP BY 1, 2 ORDER BY 1"
    )
    assert [(r["task_type"], r["status"], r["n"]) for r in statuses] == [
        ("mail.send", "DEAD_LETTER", 200),
        ("sms.send", "PENDING", 250),
        ("sync.push", "DEAD_LETTER", 50),
    ]
    assigned = taskq_cli("dlq", "assign", "--group", mail, "--to", "ana", "--dsn", dsn)
    assert assigned.returncode == 0 and "assigned to ana: 200 dead letter(s)" in assigned.stdout
    resolved = taskq_cli(
        "dlq", "resolve", "--group", sync, "--ignored", "--note", "test data", "--dsn", dsn
    )
    assert resolved.returncode == 0 and "resolved as ignored: 50" in resolved.stdout
    new = _json("dlq", "list", "--state", "new", "--dsn", dsn)
    assert new == []
    investigating = _json("dlq", "list", "--state", "investigating", "--limit", "1", "--dsn", dsn)
    assert investigating[0]["owner"] == "ana" and investigating[0]["matching"] == 200

    report = _json("dlq", "report", "--since", "12h", "--dsn", dsn)
    assert {r["fingerprint"]: (r["total"], r["still_open"]) for r in report["new"]} == {
        sms: (250, 0),
        mail: (200, 200),
        sync: (50, 0),
    }
    assert sorted((r["resolution"], r["total"]) for r in report["resolved"]) == [
        ("ignored", 50),
        ("requeued", 250),
    ]
    assert [(r["fingerprint"], r["state"], r["owner"], r["total"]) for r in report["open"]] == [
        (mail, "investigating", "ana", 200)
    ]
    text = taskq_cli("dlq", "report", "--dsn", dsn)
    assert text.returncode == 0 and "still open" in text.stdout and "ana" in text.stdout
    needs_how = taskq_cli("dlq", "resolve", "--group", mail, "--dsn", dsn)
    assert needs_how.returncode == 1 and "--fixed or --ignored" in needs_how.stderr


def test_throttled_requeue_ctrl_c_leaves_the_rest_and_audits_the_count(dsn: str) -> None:
    _dead(dsn, 500, "sms.send", "HTTPError: 503 for order {i}")
    proc = subprocess.Popen(
        [*taskq_command(), "dlq", "requeue", "--all", "--rate", "50/s", "--dsn", dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=os.environ.copy(),
    )
    deadline = time.monotonic() + 30
    while rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'PENDING'")[0]["n"] < 200:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 130, stderr
    pending = rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'PENDING'")[0]["n"]
    assert 200 <= pending < 500
    [summary] = rows(dsn, "SELECT detail FROM taskq.audit WHERE action = 'dlq_requeue_run'")
    assert summary["detail"]["interrupted"] is True
    assert summary["detail"]["count"] == pending and summary["detail"]["planned"] == 500
    assert f"requeued {pending} of 500" in stderr
    per_task = rows(dsn, "SELECT count(*) AS n FROM taskq.audit WHERE action = 'dlq_requeue'")
    assert per_task[0]["n"] == pending
