"""What a new user sees while a retry waits: the failing attempt's error and the retry time in
`watch` and the worker's log, and `show` saying an old error belongs to an earlier attempt."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import all_in, taskq_cli, wait_until


@pytest.mark.slow
async def test_a_waiting_retry_shows_its_error_and_when_it_runs_again(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("fh.flaky", max_retry_count=2, retry_delay=3600, retry_jitter=0)
    async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
        raise RuntimeError("the SMS gateway said 503")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        task_id = await app.enqueue(conn, "fh.flaky", {})
    await worker_factory(app)

    await wait_until(all_in(dsn, {"FAILED"}), what="the first attempt failed")
    watched = taskq_cli("watch", str(task_id), "--timeout", "0.5", "--dsn", dsn)
    line = watched.stdout.strip().splitlines()[0]
    assert "FAILED" in line and "the SMS gateway said 503" in line and "(retry at " in line
    as_json = json.loads(
        taskq_cli("watch", str(task_id), "--json", "--timeout", "0.5", "--dsn", dsn)
        .stdout.strip()
        .splitlines()[0]
    )
    assert as_json["error"].endswith("the SMS gateway said 503")
    assert as_json["retry_at"]
    shown = taskq_cli("show", str(task_id), "--dsn", dsn).stdout
    assert "last error — retry due at" in shown


def test_show_labels_an_old_error_as_an_earlier_attempts(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        task_id = taskq.App().enqueue(conn, "fh.done", {})
        conn.execute(
            "UPDATE taskq.tasks SET status = 'SUCCESS', retry_count = 1, "
            "last_error = 'RuntimeError: transient' WHERE id = %s",
            (task_id,),
        )
    shown = taskq_cli("show", str(task_id), "--dsn", dsn)
    assert shown.returncode == 0, shown.stderr
    assert "last error (of an earlier attempt)" in shown.stdout
