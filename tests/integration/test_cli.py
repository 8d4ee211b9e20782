"""The taskq command as a user runs it: exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import WorkerProcess, rows, status_of, taskq_cli, wait_until_sync

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=2"


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert text in lines[0], lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_help_everywhere() -> None:
    for args in (
        [],
        ["migrate"],
        ["worker"],
        ["enqueue"],
        ["stats"],
        ["dlq"],
        ["dlq", "list"],
        ["dlq", "show"],
        ["dlq", "requeue"],
        ["dlq", "discard"],
        ["demo"],
    ):
        result = taskq_cli(*args, "--help")
        assert result.returncode == 0, (args, result.stderr)
        assert "Usage:" in result.stdout
        if args and args != ["dlq"]:
            assert "--dsn" in result.stdout, args


@pytest.mark.slow
def test_enqueue_prints_the_id_and_stats_show_it(dsn: str) -> None:
    result = taskq_cli(
        "enqueue",
        "sms.notify",
        "--payload",
        '{"to": "+49"}',
        "--biz-id",
        "o-1",
        "--priority",
        "5",
        "--queue",
        "sms",
        "--delay",
        "0",
        "--dsn",
        dsn,
    )
    assert result.returncode == 0, result.stderr
    task_id = int(result.stdout.strip())
    row = status_of(dsn, task_id)
    assert (row["task_type"], row["queue"], row["priority"], row["biz_id"], row["payload"]) == (
        "sms.notify",
        "sms",
        5,
        "o-1",
        {"to": "+49"},
    )

    stats = taskq_cli("stats", "--json", "--dsn", dsn)
    assert stats.returncode == 0, stats.stderr
    [entry] = json.loads(stats.stdout)["types"]
    assert entry["queue"] == "sms" and entry["backlog"]["runnable"] == 1
    assert entry["oldest_runnable_seconds"] >= 0
    human = taskq_cli("stats", "--dsn", dsn)
    assert human.returncode == 0 and "sms.notify" in human.stdout


def test_dsn_from_environment(dsn: str) -> None:
    result = taskq_cli("enqueue", "x.y", env={"TASKQ_DSN": dsn})
    assert result.returncode == 0, result.stderr
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.tasks")[0]["n"] == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,text",
    [
        (["enqueue", "x.y", "--payload", "{not json"], "--payload is not valid JSON"),
        (["enqueue", "", "--payload", "{}"], "task type must not be empty"),
        (["enqueue", "x" * 201], "limit is 200"),
        (["enqueue", "bad\x01type"], "control characters"),
        (["enqueue", "x.y", "--queue", "q\tq"], "control characters"),
        (["enqueue", "x.y", "--priority", "99999"], "priority"),
        (["dlq", "requeue"], "say which dead letters"),
        (["dlq", "requeue", "1", "--all"], "give only one of"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(dsn: str, args: list[str], text: str) -> None:
    result = taskq_cli(*args, "--dsn", dsn)
    assert_one_line_error(result, 1, text)
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.tasks")[0]["n"] == 0


@pytest.mark.slow
def test_unreachable_database_exits_3() -> None:
    for args in (["enqueue", "x.y"], ["stats"], ["dlq", "list"], ["migrate"]):
        result = taskq_cli(*args, "--dsn", UNREACHABLE)
        assert_one_line_error(result, 3, "database unavailable")


def test_worker_with_unreachable_database_exits_3() -> None:
    result = taskq_cli("worker", "--app", "tests.apps.basic:app", "--dsn", UNREACHABLE)
    assert result.returncode == 3, result.stderr
    assert "database unavailable" in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec,text",
    [
        ("nope_no_such_module:app", "cannot import 'nope_no_such_module'"),
        ("tests.apps.basic:missing", "has no attribute 'missing'"),
        ("tests.apps.basic:not_an_app", "not a taskq.App"),
        ("no-colon", "module:attribute"),
    ],
)
def test_bad_app_is_one_line(dsn: str, spec: str, text: str) -> None:
    assert_one_line_error(taskq_cli("worker", "--app", spec, "--dsn", dsn), 1, text)


@pytest.mark.slow
def test_bad_queues_spec(dsn: str) -> None:
    result = taskq_cli("worker", "--app", "tests.apps.basic:app", "--queues", "sms=0", "--dsn", dsn)
    assert_one_line_error(result, 1, "concurrency must be >= 1")


def _dead_letter(dsn: str, task_type: str = "test.dead", error: str = "ValueError: x") -> int:
    return int(
        rows(
            dsn,
            "INSERT INTO taskq.tasks (task_type, status, retry_count, max_retry_count, last_error,"
            " finished_at) VALUES (%s, 'DEAD_LETTER', 5, 5, %s, now()) RETURNING id",
            (task_type, error),
        )[0]["id"]
    )


@pytest.mark.slow
def test_dlq_list_show_requeue_discard(dsn: str) -> None:
    a = _dead_letter(dsn, "test.a", "ValueError: bad order\nTraceback ...")
    b = _dead_letter(dsn, "test.b")
    c = _dead_letter(dsn, "test.b")

    listed = json.loads(taskq_cli("dlq", "list", "--json", "--dsn", dsn).stdout)
    assert {r["id"] for r in listed} == {a, b, c}
    only_b = json.loads(
        taskq_cli("dlq", "list", "--task-type", "test.b", "--json", "--dsn", dsn).stdout
    )
    assert {r["id"] for r in only_b} == {b, c}
    human = taskq_cli("dlq", "list", "--dsn", dsn)
    assert human.returncode == 0 and "bad order" in human.stdout

    shown = taskq_cli("dlq", "show", str(a), "--dsn", dsn)
    assert shown.returncode == 0 and "Traceback ..." in shown.stdout

    dry = json.loads(
        taskq_cli(
            "dlq", "requeue", "--task-type", "test.b", "--dry-run", "--json", "--dsn", dsn
        ).stdout
    )
    assert dry == {"dry_run": True, "ids": [b, c], "count": 2}
    assert status_of(dsn, b)["status"] == "DEAD_LETTER"

    done = taskq_cli(
        "dlq", "requeue", str(a), "--reset-retries", "--note", "fixed the parser", "--dsn", dsn
    )
    assert done.returncode == 0 and f"requeued 1 task(s): {a}" in done.stdout
    row = status_of(dsn, a)
    assert row["status"] == "PENDING" and row["retry_count"] == 0

    gone = taskq_cli("dlq", "discard", "--task-type", "test.b", "--note", "obsolete", "--dsn", dsn)
    assert gone.returncode == 0 and "discarded 2 task(s)" in gone.stdout
    assert (
        rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE task_type = 'test.b'")[0]["n"] == 0
    )
    audit = rows(dsn, "SELECT action, task_id, note, detail FROM taskq.audit ORDER BY id")
    assert [(x["action"], x["task_id"], x["note"]) for x in audit] == [
        ("dlq_requeue", a, "fixed the parser"),
        ("dlq_discard", b, "obsolete"),
        ("dlq_discard", c, "obsolete"),
    ]
    assert audit[1]["detail"]["last_error"] == "ValueError: x"

    shown = taskq_cli("dlq", "show", str(a), "--dsn", dsn)
    assert "dlq_requeue" in shown.stdout and "fixed the parser" in shown.stdout


@pytest.mark.slow
def test_dlq_requeue_of_a_live_task_changes_nothing(dsn: str) -> None:
    dead = _dead_letter(dsn)
    live = int(rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('x') RETURNING id")[0]["id"])
    result = taskq_cli("dlq", "requeue", str(dead), str(live), "--dsn", dsn)
    assert_one_line_error(result, 1, f"not a dead letter, nothing changed: {live} (PENDING)")
    assert status_of(dsn, dead)["status"] == "DEAD_LETTER"
    missing = taskq_cli("dlq", "discard", "999999", "--dsn", dsn)
    assert_one_line_error(missing, 1, "999999 (no such task)")
    assert_one_line_error(taskq_cli("dlq", "show", "999999", "--dsn", dsn), 1, "no task with id")


@pytest.mark.slow
def test_migrate_sql_needs_no_database() -> None:
    result = taskq_cli("migrate", "--sql", "--dsn", UNREACHABLE)
    assert result.returncode == 0 and "CREATE TABLE taskq.tasks" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_worker_subprocess_runs_tasks_and_stops_on_sigterm(
    dsn: str, tmp_path: Path, event_loop: str
) -> None:
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}
    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type) SELECT t"
        " FROM generate_series(1, 25), unnest(ARRAY['test.record_sync', 'test.record']) AS t"
        " RETURNING id",
    )
    worker = WorkerProcess(
        dsn,
        "tests.apps.basic:app",
        "--queues",
        "default=4",
        "--event-loop",
        event_loop,
        env=env,
        log_dir=tmp_path / "logs",
    )
    try:
        wait_until_sync(
            lambda: (
                rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'SUCCESS'")[0]["n"]
                == 50
            ),
            timeout=30,
            what="50 SUCCESS",
        )
    finally:
        code = worker.stop()
    assert code == 0, worker.log_path.read_text()
    events = [e["event"] for e in worker.events()]
    assert "worker_ready" in events and "task_succeeded" in events and "worker_stopped" in events
    [starting] = [e for e in worker.events() if e["event"] == "worker_starting"]
    assert starting["event_loop"] == event_loop
    runs = "".join(p.read_text() for p in tmp_path.glob("runs-*.log")).split("\n")
    assert len([r for r in runs if r]) == 50
    assert os.environ.get("TASKQ_TEST_RUNS_DIR") is None


@pytest.mark.slow
def test_asking_for_uvloop_without_it_installed_is_one_line(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "uvloop.py").write_text("raise ImportError('no uvloop here')\n")
    hidden = {"PYTHONPATH": str(tmp_path)}  # found before site-packages: uvloop "missing"
    args = ["--app", "tests.apps.basic:app", "--dsn", dsn, "--event-loop", "uvloop"]
    result = taskq_cli("worker", *args, env=hidden)
    assert_one_line_error(result, 1, "uvloop is not installed (pip install 'taskq[speed]')")


def render(value: Any) -> str:
    return json.dumps(value)


@pytest.mark.slow
def test_payload_limit_from_the_environment(dsn: str) -> None:
    big = json.dumps({"blob": "x" * 2000})
    result = taskq_cli(
        "enqueue", "x.y", "--payload", big, "--dsn", dsn, env={"TASKQ_MAX_PAYLOAD_BYTES": "1000"}
    )
    assert_one_line_error(result, 1, "the limit is 1000 bytes")
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.tasks")[0]["n"] == 0
    assert taskq_cli("enqueue", "x.y", "--payload", big, "--dsn", dsn).returncode == 0


@pytest.mark.slow
def test_demo_runs_to_the_end(dsn: str) -> None:
    """The tour: every task settles, exactly-once and checkpoints are shown, stats printed."""
    result = taskq_cli("demo", "--dsn", dsn, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    assert "all tasks settled" in out
    assert "the account got 10 points (10 once)" in out
    flat = " ".join(out.split())  # lines wrap at 120 columns
    assert (
        "extract by attempt 0, transform by attempt 0, render by attempt 1, "
        "publish by attempt 1" in flat
    )
    assert max(len(line) for line in out.splitlines()) <= 120  # fits a normal terminal
    assert "taskq stats" in out and "demo.report" in out
    assert (
        rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'DEAD_LETTER'")[0]["n"] == 2
    )


def test_metrics_port_in_use_is_one_line(dsn: str) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = taskq_cli(
            "worker", "--app", "tests.apps.basic:app", "--dsn", dsn, "--metrics-port", str(port)
        )
    assert_one_line_error(result, 1, f"--metrics-port {port}: cannot listen")


def test_dlq_requeue_dry_run_predicts_a_unique_key_refusal(dsn: str) -> None:
    make = (
        "INSERT INTO taskq.tasks (task_type, unique_key, status, finished_at) "
        "VALUES ('mail.welcome', %s, %s, CASE WHEN %s = 'DEAD_LETTER' THEN now() END) RETURNING id"
    )
    clash = int(rows(dsn, make, ("user-1", "DEAD_LETTER", "DEAD_LETTER"))[0]["id"])
    rows(dsn, make, ("user-1", "PENDING", "PENDING"))  # a live task holds the key
    fine = int(rows(dsn, make, ("user-2", "DEAD_LETTER", "DEAD_LETTER"))[0]["id"])
    dry = taskq_cli("dlq", "requeue", str(clash), str(fine), "--dry-run", "--dsn", dsn)
    real = taskq_cli("dlq", "requeue", str(clash), str(fine), "--dsn", dsn)
    for result in (dry, real):
        assert_one_line_error(result, 1, "cannot requeue, nothing changed")
    ok = taskq_cli("dlq", "requeue", str(fine), "--dry-run", "--json", "--dsn", dsn)
    assert json.loads(ok.stdout) == {"dry_run": True, "ids": [fine], "count": 1}
    assert status_of(dsn, fine)["status"] == "DEAD_LETTER"
    assert rows(dsn, "SELECT count(*) AS n FROM taskq.audit")[0]["n"] == 0
