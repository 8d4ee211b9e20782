"""The observation panel over HTTP against a real database: the four charts from a worker's
mixed run, the task browser's filters and keyset pages, and the workers page."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import taskq
from tests import factories
from tests.integration.test_dashboard import XSS, client
from tests.support import all_in, wait_until


async def test_charts_show_a_mixed_run(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("p.ok")
    async def ok(ctx: taskq.TaskContext, payload: Any) -> None:
        await asyncio.sleep(0.01)

    @app.task("p.flaky", max_retry_count=2, retry_delay=0, retry_jitter=0)
    async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
        if ctx.attempt < payload["fails"]:
            raise RuntimeError("not yet")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(
            conn,
            [{"task_type": "p.ok"}] * 10
            + [{"task_type": "p.flaky", "payload": {"fails": n}} for n in (1, 2, 3)],
        )
    await worker_factory(app, gauge_interval_seconds=0.2)
    await wait_until(all_in(dsn, {"SUCCESS", "DEAD_LETTER"}), what="settled")
    web = client(dsn)
    page = web.get("/?range=15m")
    assert page.status_code == 200
    charts = re.findall(r'<img class="chart" data-chart="(\w+)" src="([^"]+)"', page.text)
    assert [c for c, _ in charts] == ["outcomes", "backlog", "latency", "retries"]
    for key, src in charts:
        svg = web.get(src.replace("&amp;", "&"))
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
        if key in ("outcomes", "latency"):
            assert 'class="series"' in svg.text, key
        if key == "backlog":
            assert 'data-series="runnable"' in svg.text
        if key == "retries":
            # 10 first-time successes; one success after 1 retry; after 2 retries one success
            # and one dead letter (its retries were exhausted).
            assert re.findall(r'data-value="(\d+)"', svg.text)[:4] == ["10", "1", "2", "0"]
    per_type = web.get("/types/p.flaky?range=1h")
    assert (
        per_type.status_code == 200
        and "/charts/outcomes.svg?range=1h&amp;task_type=p.flaky" in (per_type.text)
    )
    assert web.get("/?range=2y").status_code == 400


def test_the_browser_filters_and_pages_by_id(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        done = factories.tasks(conn, 120, task_type="b.done", status="SUCCESS", age=60)
        mine = factories.task(conn, task_type="b.order", biz_id="order-7", status="PENDING")
        factories.task(conn, task_type=XSS, biz_id=XSS, status="FAILED")
    web = client(dsn)
    by_biz = web.get("/tasks", params={"biz_id": "order-7"})
    assert re.findall(r'<tr data-id="(\d+)"', by_biz.text) == [str(mine)]
    first = web.get("/tasks", params={"status": "SUCCESS"})
    ids = [int(i) for i in re.findall(r'<tr data-id="(\d+)"', first.text)]
    assert ids == sorted(done, reverse=True)[:50]
    older = re.search(r'href="/tasks\?([^"]+)" rel="next"', first.text)
    assert older is not None
    second = web.get("/tasks?" + older.group(1).replace("&amp;", "&"))
    ids2 = [int(i) for i in re.findall(r'<tr data-id="(\d+)"', second.text)]
    assert ids2 == sorted(done, reverse=True)[50:100]
    assert XSS not in web.get("/tasks").text  # hostile type and biz_id shown as text
    assert web.get("/tasks", params={"status": "NOPE"}).status_code == 400
    assert web.get("/tasks", params={"min_id": "x"}).status_code == 400


def test_workers_page_shows_live_and_dead_workers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        factories.worker(conn, "w-live", queues=Jsonb({"default": 4}))
        factories.worker(conn, "w-dead", heartbeat_ago=600, lease_seconds=30)
        factories.task(conn, status="PROCESSING", worker_id="w-live")
        factories.task(
            conn, status="FAILED", worker_id="w-dead", last_error="WorkerLost: worker w-dead"
        )
        conn.execute("UPDATE taskq.workers SET rss_bytes = 50 * 1048576 WHERE id = 'w-live'")
    page = client(dsn).get("/workers").text
    live = re.search(r'<tr data-worker="w-live" data-alive="yes">(.*?)</tr>', page, re.S)
    dead = re.search(r'<tr data-worker="w-dead" data-alive="no">(.*?)</tr>', page, re.S)
    assert live and dead
    assert "default (4)" in live.group(1) and "50 MiB" in live.group(1)
    assert "<td>1</td>" in live.group(1)  # running
    assert "1 of its tasks rescued" in dead.group(1)
