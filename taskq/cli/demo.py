"""``taskq demo``: a one-minute tour on the embedded database.

It creates a fresh ``taskq_demo`` database (on the embedded server; with ``--dsn`` it uses the
database given), migrates it, registers a few task types, enqueues a mix in one business
transaction plus one bare SQL INSERT, runs a worker with a live view, and prints the stats.
"""

from __future__ import annotations

import asyncio
import os
import random
import shlex
import time
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

import taskq
from taskq import logs
from taskq.db import embedded, migrate, store
from taskq.db.connection import connect, session
from taskq.ops import dlq
from taskq.ops import stats as stats_ops
from taskq.ops.formatting import render_report, safe

DEMO_DB = "taskq_demo"


def build_app(dsn: str) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("demo.email", retry_delay=1, retry_jitter=0.5)
    async def send_email(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(random.uniform(0.05, 0.3))  # an SMTP call

    @app.task("demo.thumbnail", retry_delay=1, retry_jitter=0.5)
    def make_thumbnail(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        time.sleep(random.uniform(0.2, 0.6))  # CPU or blocking I/O: runs in a thread

    @app.task("demo.report", queue="reports", timeout=60)
    async def build_report(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        steps = 12
        for step in range(steps):
            await asyncio.sleep(0.35)
            ctx.progress(100 * (step + 1) / steps, f"section {step + 1}/{steps}")

    @app.task("demo.flaky_sync", retry_delay=1, retry_jitter=0.5)
    def flaky(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        if ctx.attempt < 2:
            raise ConnectionError(f"partner API unavailable (attempt {ctx.attempt})")

    @app.task("demo.broken", max_retry_count=2, retry_delay=0.5, retry_jitter=0.2)
    def broken(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        raise ValueError(f"cannot parse order {payload.get('order')!r}")

    @app.task("demo.invalid")
    def invalid(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        raise taskq.Permanent("the customer deleted their account: retrying cannot help")

    @app.task("demo.points", idempotent=True)
    def add_points(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        # Exactly once per biz_id: this UPDATE commits with the task's SUCCESS, or not at all.
        ctx.conn.execute(
            "UPDATE demo_accounts SET points = points + %s WHERE id = %s",
            (payload["points"], payload["account"]),
        )

    @app.task("demo.pipeline", queue="reports", retry_delay=0.5, retry_jitter=0.2)
    def pipeline(ctx: taskq.TaskContext, payload: dict[str, Any]) -> None:
        stages = ["extract", "transform", "render", "publish"]
        start = stages.index(ctx.stage) + 1 if ctx.stage else 0
        for stage in stages[start:]:
            time.sleep(0.3)
            ctx.checkpoint(stage, **{stage: f"attempt {ctx.attempt}"})
            if stage == "transform" and ctx.attempt == 0:
                raise ConnectionError("the render farm went away after stage 2")

    return app


def demo_dsn(dsn: str | None, console: Console) -> str:
    given = dsn or os.environ.get("TASKQ_DSN")
    if given:
        console.print(f"[bold]taskq demo[/bold] on the database you gave ({DEMO_DB} not used)")
        return given
    server = embedded.start_server(embedded.taskq_home() / "pgdata")
    with connect(server, autocommit=True) as conn:
        store.recreate_database(conn, DEMO_DB)
    console.print(
        f"[bold]taskq demo[/bold] on the embedded PostgreSQL in {embedded.taskq_home() / 'pgdata'}"
        f" (fresh database {DEMO_DB!r})"
    )
    return make_conninfo(server, dbname=DEMO_DB)


def enqueue_mix(app: taskq.App, dsn: str) -> int:
    with session(dsn) as conn, conn.transaction():
        # In a real service this is your business transaction: the tasks commit with it.
        conn.execute("CREATE TABLE IF NOT EXISTS demo_orders (id int PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS demo_accounts (id int PRIMARY KEY, points int NOT NULL)"
        )
        conn.execute("INSERT INTO demo_accounts VALUES (1, 0) ON CONFLICT DO NOTHING")
        for i in range(1, 4):
            conn.execute("INSERT INTO demo_orders VALUES (%s) ON CONFLICT DO NOTHING", (i,))
            app.enqueue(conn, "demo.report", {"order": i}, biz_id=f"order-{i}", priority=5)
        items = [
            taskq.EnqueueItem("demo.email", {"to": f"user{i}@example.com"}, biz_id=f"user-{i}")
            for i in range(30)
        ] + [taskq.EnqueueItem("demo.thumbnail", {"image": i}) for i in range(8)]
        ids = app.enqueue_many(conn, items)
        app.enqueue(conn, "demo.flaky_sync", {"order": 7}, biz_id="order-7")
        app.enqueue(conn, "demo.broken", {"order": "4x2"}, biz_id="order-8")
        app.enqueue(conn, "demo.invalid", {"user": 99}, biz_id="user-99")
        # The same business event delivered three times: the points are added once.
        for _ in range(3):
            app.enqueue(conn, "demo.points", {"account": 1, "points": 10}, biz_id="order-100")
        app.enqueue(conn, "demo.pipeline", {"report": "monthly"}, biz_id="report-11")
    with psycopg.connect(dsn, autocommit=True) as raw:
        # Any language can enqueue with a bare INSERT; the trigger wakes the workers.
        raw.execute(
            "INSERT INTO taskq.tasks (task_type, payload) VALUES ('demo.email', "
            '\'{"to": "from-sql@example.com"}\')'
        )
    return len(ids) + 3 + 3 + 3 + 1 + 1


def _view(rows: list[stats_ops.TypeStats], running: list[dict[str, Any]]) -> Group:
    table = Table(title="taskq demo — live", title_justify="left")
    table.add_column("task type")
    for col in ("PENDING", "PROCESSING", "FAILED (retry due)", "SUCCESS", "DEAD_LETTER"):
        table.add_column(col, justify="right")
    for r in rows:
        c = r.counts
        table.add_row(
            safe(r.task_type),
            str(c["PENDING"]),
            str(c["PROCESSING"]),
            str(c["FAILED"]),
            f"[green]{c['SUCCESS']}[/green]",
            f"[red]{c['DEAD_LETTER']}[/red]",
        )
    bars = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[msg]}"))
    for t in running:
        if t["task_type"] != "demo.report":
            continue
        p = t["progress"] or {}
        bars.add_task(
            f"report #{t['id']}",
            total=100,
            completed=int(p.get("percent", 0)),
            msg=safe(p.get("message") or ""),
        )
    return Group(table, bars)


def _settled(rows: list[stats_ops.TypeStats]) -> bool:
    return bool(rows) and all(
        r.counts["PENDING"] == r.counts["PROCESSING"] == r.counts["FAILED"] == 0 for r in rows
    )


async def _run(app: taskq.App, dsn: str, budget: float, console: Console) -> bool:
    worker = taskq.Worker(
        app,
        dsn=dsn,
        settings=taskq.WorkerSettings(
            queues={"default": 8, "reports": 3},
            poll_interval_seconds=0.3,
            shutdown_timeout_seconds=5,
        ),
    )
    deadline = time.monotonic() + budget
    settled = False
    with session(dsn) as conn:
        conn.autocommit = True
        async with asyncio.TaskGroup() as group:
            group.create_task(worker.run())
            with Live(console=console, refresh_per_second=8, transient=False) as live:
                while time.monotonic() < deadline:
                    rows = await asyncio.to_thread(stats_ops.backlog, dsn)
                    running = await asyncio.to_thread(store.running_tasks, conn)
                    live.update(_view(rows, running))
                    if _settled(rows):
                        settled = True
                        break
                    await asyncio.sleep(0.2)
            worker.request_stop()
    return settled


def run(dsn: str | None, *, budget_seconds: float, console: Console) -> int:
    logs.configure("console", "error")
    target = demo_dsn(dsn, console)
    migrate.upgrade(target)
    app = build_app(target)
    count = enqueue_mix(app, target)
    console.print(
        f"enqueued {count} tasks in one business transaction (+1 bare SQL INSERT); "
        "starting a worker: queues default=8, reports=3"
    )
    started = time.monotonic()
    settled = asyncio.run(_run(app, target, budget_seconds, console))
    elapsed = time.monotonic() - started
    console.print("\n[bold]taskq stats[/bold] (what `taskq stats` shows):")
    render_report(stats_ops.report(target, minutes=15), console)
    dead = dlq.list_dead(target, limit=10)
    if dead:
        console.print(
            f"\n{len(dead)} task(s) ended in DEAD_LETTER, as designed. To look at one and "
            "replay it, point taskq at the demo's database, then:"
        )
        # One command per line, never wrapped, so each pastes as it is.
        for line in (
            f"export TASKQ_DSN={shlex.quote(target)}",
            f"taskq dlq show {dead[0]['id']}",
            f"taskq dlq requeue {dead[0]['id']} --note 'fixed'",
        ):
            console.print(f"  {line}", markup=False, soft_wrap=True)
    _explain_semantics(target, console)
    if not settled:
        console.print(f"[red]demo did not settle within {budget_seconds:.0f}s[/red]")
        return 1
    console.print(f"all tasks settled in {elapsed:.1f}s")
    return 0


def _explain_semantics(dsn: str, console: Console) -> None:
    with session(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        # The demo's own business table and a look at its pipeline task: demo SQL, not taskq's.
        cur.execute("SELECT points FROM demo_accounts WHERE id = 1")
        row = cur.fetchone()
        points = int(row["points"]) if row else 0
        cur.execute(
            "SELECT retry_count, context FROM taskq.tasks"
            " WHERE task_type = 'demo.pipeline' ORDER BY id LIMIT 1"
        )
        pipeline = cur.fetchone()
    console.print(
        f"idempotent: 'demo.points' was delivered 3 times for biz_id order-100; "
        f"the account got {points} points (10 once).",
        soft_wrap=True,
    )
    if pipeline is not None:
        data = pipeline["context"]["data"]
        stages = ", ".join(
            f"{stage} by {data[stage]}"
            for stage in ("extract", "transform", "render", "publish")
            if stage in data
        )
        console.print(
            f"checkpoints: 'demo.pipeline' failed after stage 2 and was retried "
            f"{pipeline['retry_count']} time(s), skipping the stages already done: {stages}"
        )
