"""The task browser on a table of one million finished rows: every filter is an index scan and
answers in under 50 ms (EXPLAIN ANALYZE), so browsing never reads the history."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from taskq.db.sqlfiles import query
from taskq.ops.panel import Filters
from tests.conftest import fresh_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 1_000_000


@pytest.fixture(scope="module")
def million(admin_dsn: str, template_db: str) -> Iterator[str]:
    """One database for the module: loading a million rows takes a while."""
    with fresh_database(admin_dsn, template_db) as dsn:
        _load(dsn)
        yield dsn


def _load(dsn: str) -> None:
    # Ids grow with time, as they do for real: the newest rows have the highest ids. An old
    # incident left 100,000 dead letters among the oldest rows (the hard case for newest-first).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO taskq.tasks (task_type, queue, biz_id, status, retry_count,
                                     started_at, finished_at, created_at, trace_id)
            SELECT 'type-' || (g %% 20), 'q' || (g %% 3), 'biz-' || g,
                   CASE WHEN g <= %(n)s / 10 THEN 'DEAD_LETTER' ELSE 'SUCCESS' END, g %% 3,
                   now() - make_interval(secs => %(n)s - g),
                   now() - make_interval(secs => %(n)s - g),
                   now() - make_interval(secs => %(n)s - g + 1), md5(g::text)
            FROM generate_series(1, %(n)s) AS g
            """,
            {"n": ROWS},
        )
        conn.execute("INSERT INTO taskq.tasks (task_type, biz_id) VALUES ('type-1', 'fresh')")
        conn.execute("ANALYZE taskq.tasks")


def plan(dsn: str, filters: Filters) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            b"EXPLAIN (ANALYZE, FORMAT JSON) " + query("browse_tasks").encode(),
            filters.params(51),
        ).fetchone()
    assert row is not None
    found: dict[str, Any] = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
    return found


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(status="SUCCESS"),
        Filters(status="PENDING"),
        Filters(status="DEAD_LETTER"),
        Filters(status="PROCESSING"),
        Filters(status="FAILED"),
        Filters(status="CANCELLED"),
        Filters(biz_id="biz-123456"),
        Filters(trace_id="e10adc3949ba59abbe56e057f20f883e"),
        Filters(min_id=500_000, before_id=500_100),
        Filters(status="SUCCESS", before_id=400_000),
        Filters(task_type="type-7"),
        Filters(max_age_seconds=3600),
    ],
    ids=[
        "all",
        "status",
        "rare-status",
        "old-dead-letters",
        "processing",
        "failed",
        "cancelled",
        "biz_id",
        "trace",
        "id-range",
        "page-2",
        "type",
        "age",
    ],
)
def test_every_browser_query_is_an_index_scan_under_50_ms(million: str, filters: Filters) -> None:
    explained = plan(million, filters)
    scans = {n["Node Type"] for n in nodes(explained["Plan"])}
    assert "Seq Scan" not in scans and "Parallel Seq Scan" not in scans, scans
    assert explained["Execution Time"] < 50, explained["Execution Time"]
