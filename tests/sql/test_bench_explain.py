"""``bench/explain.py`` drains a backlog with the worker's own claim and completion statements
and explains two of its batches: it must keep running as those statements change, finish every
task, and report each explained batch's statements with their plans, buffers and WAL."""

from __future__ import annotations

import re

import psycopg
import pytest

from bench import explain
from bench.harness import connect, load_noop_backlog


def test_the_explained_drain_finishes_every_task_and_reports_both_batches(dsn: str) -> None:
    with connect(dsn) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error:
            pytest.skip("auto_explain is not installed on this server")
        load_noop_backlog(conn, 1_450)

    start, end = explain.drain(dsn, 1_450, 100, 11)

    with connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE status = 'SUCCESS') FROM taskq.tasks")
        assert row.fetchone() == (1_450,)
    assert start.startswith("start: batch 11, 450 runnable")
    assert end.startswith("end: batch 14, the last full one, 150 runnable")
    for report in (start, end):
        claim, _, completion = report.partition(" completion:")
        assert "claim (100 rows):" in claim
        # the claim function's own statements: the locking scan and the UPDATE by primary key
        assert "tasks_runnable_by_type_idx" in claim
        assert re.search(r"UPDATE taskq\.tasks .*\n.*WAL records=[1-9]", claim)
        assert "ModifyTable on tasks  (rows=100" in claim
        # the completion found its rows by the primary key (an index or a bitmap scan, as the
        # planner likes on this small table) and wrote them
        assert "Index Scan using tasks_pkey" in completion
        assert re.search(r"PROCESSING -> SUCCESS.*\n.*WAL records=[1-9]", completion)
