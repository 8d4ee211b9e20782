"""Task semantics: idempotent handlers, unique enqueue, stage checkpoints, per-key ordering,
child tasks, periodic schedules, reconciliation."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

import taskq
from taskq.model import ClaimedTask
from taskq.schedules import Schedule, plan
from taskq.worker.scheduler import run_schedule
from tests.support import (
    WorkerProcess,
    all_in,
    count,
    execute,
    read_runs,
    rows,
    status_of,
    taskq_cli,
    wait_until,
    wait_until_sync,
)

FAST = ["--heartbeat-interval", "0.5", "--reaper-interval", "0.3", "--poll-interval", "0.5"]


def accounts(dsn: str, *ids: int) -> None:
    execute(dsn, "CREATE TABLE accounts (id int PRIMARY KEY, points int NOT NULL DEFAULT 0)")
    for account in ids:
        rows(dsn, "INSERT INTO accounts (id) VALUES (%s) RETURNING id", (account,))


def points(dsn: str, account: int) -> int:
    return int(rows(dsn, "SELECT points FROM accounts WHERE id = %s", (account,))[0]["points"])


# --- idempotent handlers ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_same_biz_id_changes_the_business_table_once(
    dsn: str, worker_factory: Any, flavour: str
) -> None:
    """Eight tasks with the same biz_id, eight slots at once: one UPDATE commits; the other
    seven complete as duplicates without running."""
    accounts(dsn, 1)
    app = taskq.App(dsn=dsn)
    ran: list[int] = []

    if flavour == "sync":

        @app.task("pts.add", idempotent=True)
        def add_sync(ctx: taskq.TaskContext, payload: Any) -> None:
            ran.append(ctx.task_id)
            ctx.conn.execute("UPDATE accounts SET points = points + 10 WHERE id = 1")

    else:

        @app.task("pts.add", idempotent=True)
        async def add_async(ctx: taskq.TaskContext, payload: Any) -> None:
            ran.append(ctx.task_id)
            await ctx.aconn.execute("UPDATE accounts SET points = points + 10 WHERE id = 1")
            await asyncio.sleep(0.05)

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        ids = await app.enqueue_many(
            conn, [{"task_type": "pts.add", "biz_id": "order-1"} for _ in range(8)]
        )
    await worker_factory(app, queues={"default": 8})
    await wait_until(all_in(dsn, {"SUCCESS"}), what="all complete")
    assert points(dsn, 1) == 10
    assert len(ran) == 1
    executed = rows(dsn, "SELECT task_type, biz_id, task_id FROM taskq.task_executed")
    assert executed == [{"task_type": "pts.add", "biz_id": "order-1", "task_id": ran[0]}]
    assert set(ids) == {r["id"] for r in rows(dsn, "SELECT id FROM taskq.tasks")}


@pytest.mark.slow
async def test_a_failing_idempotent_handler_rolls_everything_back(
    dsn: str, worker_factory: Any
) -> None:
    accounts(dsn, 1)
    app = taskq.App(dsn=dsn)

    @app.task("pts.flaky", idempotent=True, retry_delay=0.1, retry_jitter=0)
    async def flaky(ctx: taskq.TaskContext, payload: Any) -> None:
        await ctx.aconn.execute("UPDATE accounts SET points = points + 5 WHERE id = 1")
        await ctx.aenqueue("pts.child", {"from": ctx.task_id})
        if ctx.attempt == 0:
            raise RuntimeError("downstream said no")

    @app.task("pts.child")
    async def child(ctx: taskq.TaskContext, payload: Any) -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        task_id = await app.enqueue(conn, "pts.flaky", biz_id="b-1")
    await worker_factory(app)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="retry done")
    row = status_of(dsn, task_id)
    assert row["retry_count"] == 1 and "downstream said no" in row["last_error"]
    assert points(dsn, 1) == 5  # the first attempt's UPDATE rolled back with its failure
    # ...and so did the child it enqueued inside the transaction: exactly one child exists.
    assert count(dsn, "task_type = 'pts.child'") == 1


def test_idempotent_needs_a_biz_id(dsn: str) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("pts.needs_key", idempotent=True)
    def needs(ctx: taskq.TaskContext, payload: Any) -> None: ...

    with psycopg.connect(dsn) as conn, pytest.raises(taskq.InvalidTask, match="biz_id"):
        app.enqueue(conn, "pts.needs_key")


@pytest.mark.slow
async def test_idempotent_row_without_biz_id_is_dead_lettered(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("pts.needs_key", idempotent=True)
    async def needs(ctx: taskq.TaskContext, payload: Any) -> None: ...

    [row] = rows(dsn, "INSERT INTO taskq.tasks (task_type) VALUES ('pts.needs_key') RETURNING id")
    await worker_factory(app)
    await wait_until(lambda: status_of(dsn, row["id"])["status"] == "DEAD_LETTER", what="dlq")
    assert "no biz_id" in status_of(dsn, row["id"])["last_error"]


@pytest.mark.slow
async def test_a_second_delivery_completes_without_running(dsn: str, worker_factory: Any) -> None:
    """A task whose business key already committed (say its SUCCESS update was lost and it is
    delivered again) completes as a duplicate: the handler does not run."""
    accounts(dsn, 1)
    app = taskq.App(dsn=dsn)
    ran: list[int] = []

    @app.task("pts.once", idempotent=True)
    def once(ctx: taskq.TaskContext, payload: Any) -> None:
        ran.append(ctx.attempt)
        ctx.conn.execute("UPDATE accounts SET points = points + 1 WHERE id = 1")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        task_id = await app.enqueue(conn, "pts.once", biz_id="k")
    handle = await worker_factory(app)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="first run")
    rows(dsn, "UPDATE taskq.tasks SET status = 'PENDING' WHERE id = %s RETURNING id", (task_id,))
    handle.worker.claimers["default"].wake()
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="redelivery")
    assert ran == [0] and points(dsn, 1) == 1


@pytest.mark.slow
def test_killed_mid_transaction_the_business_write_happens_once(dsn: str, tmp_path: Path) -> None:
    accounts(dsn, 7)
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn:
        task_id = app.enqueue(
            conn, "sem.points", {"account": 7, "points": 3, "hang_first": True}, biz_id="acct-7"
        )
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}
    a = WorkerProcess(dsn, "tests.apps.semantics:app", *FAST, env=env, log_dir=tmp_path / "l")
    wait_until_sync(lambda: len(read_runs(tmp_path)) == 1, what="first attempt running")
    b = WorkerProcess(dsn, "tests.apps.semantics:app", *FAST, env=env, log_dir=tmp_path / "l")
    a.kill()
    wait_until_sync(
        lambda: status_of(dsn, task_id)["status"] == "SUCCESS",
        timeout=30,
        what="rescued and re-run",
    )
    b.stop()
    assert [r[2] for r in sorted(read_runs(tmp_path), key=lambda r: r[2])] == [0, 1]
    assert points(dsn, 7) == 3


# --- unique enqueue --------------------------------------------------------------------------


def test_eight_threads_one_unique_key_one_row(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    barrier = threading.Barrier(8)
    results: list[int] = []
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            with psycopg.connect(dsn) as conn:
                barrier.wait(10)
                results.append(app.enqueue(conn, "mail.send", {"n": 1}, biz_id="u-1", unique=True))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert count(dsn) == 1
    assert len(set(results)) == 1 and len(results) == 8


def test_unique_return_raise_and_free_again_when_finished(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        first = app.enqueue(conn, "mail.send", unique_key="welcome:42")
        assert app.enqueue(conn, "mail.send", unique_key="welcome:42") == first
        with pytest.raises(taskq.AlreadyEnqueued) as caught:
            app.enqueue(conn, "mail.send", unique_key="welcome:42", on_duplicate="raise")
        assert caught.value.existing_id == first
        # Another type may use the same key.
        assert app.enqueue(conn, "sms.send", unique_key="welcome:42") != first
        # Once the task is finished the key is free: uniqueness is over *live* tasks.
        conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE id = %s", (first,))
        second = app.enqueue(conn, "mail.send", unique_key="welcome:42")
        assert second != first
        # From SQL, too: the function returns the live task's id.
        sql_id = conn.execute(
            "SELECT taskq.enqueue('mail.send', unique_key => 'welcome:42')"
        ).fetchone()
        assert sql_id is not None and sql_id[0] == second
        # A bare INSERT that collides is refused by the index.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO taskq.tasks (task_type, unique_key) VALUES ('mail.send', 'welcome:42')"
            )


async def test_enqueue_many_with_unique_keys_maps_ids_to_items(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        live = await app.enqueue(conn, "m", unique_key="b")
        ids = await app.enqueue_many(
            conn,
            [
                {"task_type": "m", "unique_key": "a"},
                {"task_type": "m"},
                {"task_type": "m", "unique_key": "b"},  # held by `live`
                {"task_type": "m", "unique_key": "a"},  # held by item 0
                {"task_type": "m", "biz_id": "c", "unique": True},
                {"task_type": "m"},
            ],
        )
        assert ids[2] == live and ids[3] == ids[0]
        assert len({ids[0], ids[1], ids[4], ids[5], live}) == 5
        with pytest.raises(taskq.AlreadyEnqueued):
            await app.enqueue_many(
                conn, [{"task_type": "m", "unique_key": "a"}], on_duplicate="raise"
            )
    stored = rows(dsn, "SELECT id, unique_key, biz_id FROM taskq.tasks ORDER BY id")
    assert [(r["unique_key"], r["biz_id"]) for r in stored] == [
        ("b", None),
        ("a", None),
        (None, None),
        ("c", "c"),
        (None, None),
    ]


# --- stage checkpoints -----------------------------------------------------------------------


@pytest.mark.slow
def test_killed_after_stage_two_of_four_resumes_at_stage_three(dsn: str, tmp_path: Path) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn:
        task_id = app.enqueue(conn, "sem.stages", {})
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}

    def stages_run() -> list[list[str]]:
        return [
            line.split()
            for f in tmp_path.glob("stages-*.log")
            for line in f.read_text().splitlines()
        ]

    a = WorkerProcess(dsn, "tests.apps.semantics:app", *FAST, env=env, log_dir=tmp_path / "l")
    wait_until_sync(lambda: len(stages_run()) == 2, what="stages 1-2")
    wait_until_sync(
        lambda: (status_of(dsn, task_id)["context"] or {}).get("stage") == "transform",
        what="checkpoint of stage 2",
    )
    b = WorkerProcess(dsn, "tests.apps.semantics:app", *FAST, env=env, log_dir=tmp_path / "l")
    a.kill()
    wait_until_sync(
        lambda: status_of(dsn, task_id)["status"] == "SUCCESS",
        timeout=30,
        what="resumed and finished",
    )
    b.stop()
    ran = sorted(
        stages_run(),
        key=lambda r: (int(r[1]), ["fetch", "transform", "render", "upload"].index(r[2])),
    )
    assert [(r[1], r[2]) for r in ran] == [
        ("0", "fetch"),
        ("0", "transform"),
        ("1", "render"),
        ("1", "upload"),
    ]
    context = status_of(dsn, task_id)["context"]
    assert context["stage"] == "upload"
    assert set(context["data"]) == {"fetch_by", "transform_by", "render_by", "upload_by"}
    assert context["data"]["fetch_by"] == a.pid and context["data"]["upload_by"] == b.pid


@pytest.mark.slow
async def test_async_checkpoints_and_a_stale_attempt_cannot_move_the_stage(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    seen: list[Any] = []

    @app.task("ck.async", retry_delay=0.05, retry_jitter=0)
    async def staged(ctx: taskq.TaskContext, payload: Any) -> None:
        seen.append((ctx.attempt, ctx.stage, ctx.data))
        if ctx.stage is None:
            await ctx.acheckpoint("one", rows=10)
            raise RuntimeError("crash after stage one")
        await ctx.acheckpoint("two", rows=20)

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        task_id = await app.enqueue(conn, "ck.async")
    await worker_factory(app)
    await wait_until(lambda: status_of(dsn, task_id)["status"] == "SUCCESS", what="done")
    assert seen == [(0, None, {}), (1, "one", {"rows": 10})]
    assert status_of(dsn, task_id)["context"] == {"stage": "two", "data": {"rows": 20}}

    from taskq.db import store

    stale = dataclasses.replace(_blank_task(task_id), effective_id=uuid.uuid4())
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        assert await store.asave_checkpoint(conn, stale, "three", "{}") is None


# --- per-key ordering ------------------------------------------------------------------------


@pytest.mark.slow
async def test_twenty_keys_fifty_tasks_eight_slots(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    running: collections.Counter[str] = collections.Counter()
    order: dict[str, list[int]] = collections.defaultdict(list)
    overlap: list[str] = []
    peak = 0

    @app.task("ord.step")
    async def step(ctx: taskq.TaskContext, payload: Any) -> None:
        nonlocal peak
        key = payload["key"]
        running[key] += 1
        if running[key] > 1:
            overlap.append(key)
        peak = max(peak, sum(1 for v in running.values() if v))
        order[key].append(payload["seq"])
        await asyncio.sleep(0.002)
        running[key] -= 1

    items = []
    for seq in range(50):
        for k in range(20):
            # Later tasks get *higher* priority: within a key it must not matter.
            items.append(
                {
                    "task_type": "ord.step",
                    "payload": {"key": f"k{k}", "seq": seq},
                    "ordering_key": f"k{k}",
                    "priority": seq,
                }
            )
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await app.enqueue_many(conn, items)
    await worker_factory(app, queues={"default": 8})
    await wait_until(all_in(dsn, {"SUCCESS"}), timeout=60, what="1000 ordered tasks")
    assert overlap == []
    assert all(order[f"k{k}"] == list(range(50)) for k in range(20))
    assert peak > 1, "different keys ran in parallel"


@pytest.mark.slow
async def test_a_failing_head_blocks_its_key_until_dead_lettered(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)
    done: list[str] = []
    release = asyncio.Event()

    @app.task("ord.head", max_retry_count=1, retry_delay=0.2, retry_jitter=0)
    async def head(ctx: taskq.TaskContext, payload: Any) -> None:
        await release.wait()
        raise RuntimeError("head keeps failing")

    @app.task("ord.next")
    async def nxt(ctx: taskq.TaskContext, payload: Any) -> None:
        done.append(payload["name"])

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        head_id = await app.enqueue(conn, "ord.head", ordering_key="acct-1")
        await app.enqueue(conn, "ord.next", {"name": "same-key"}, ordering_key="acct-1")
        await app.enqueue(conn, "ord.next", {"name": "other-key"}, ordering_key="acct-2")
    await worker_factory(app, queues={"default": 4}, poll_interval_seconds=0.1)
    await wait_until(lambda: done == ["other-key"], what="the other key runs")
    assert count(dsn, "task_type = 'ord.next' AND status = 'PENDING'") == 1
    release.set()
    await wait_until(lambda: status_of(dsn, head_id)["status"] == "DEAD_LETTER", what="dead head")
    await wait_until(lambda: done == ["other-key", "same-key"], what="key released")


# --- child tasks and traces ------------------------------------------------------------------


@pytest.mark.slow
async def test_children_inherit_the_trace_and_show_prints_the_tree(
    dsn: str, worker_factory: Any
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("tree.root")
    async def root(ctx: taskq.TaskContext, payload: Any) -> None:
        for n in range(2):
            await ctx.aenqueue("tree.child", {"n": n})

    @app.task("tree.child")
    def child(ctx: taskq.TaskContext, payload: Any) -> None:
        if payload["n"] == 0:
            ctx.enqueue("tree.grandchild", {}, biz_id="gc")

    @app.task("tree.grandchild")
    async def grandchild(ctx: taskq.TaskContext, payload: Any) -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        root_id = await app.enqueue(conn, "tree.root")
        other_root = await app.enqueue(conn, "tree.grandchild")
    await worker_factory(app)
    await wait_until(lambda: count(dsn) == 5 and all_in(dsn, {"SUCCESS"})(), what="tree done")
    tasks = {r["id"]: r for r in rows(dsn, "SELECT * FROM taskq.tasks")}
    trace = tasks[root_id]["trace_id"]
    family = [t for t in tasks.values() if t["id"] != other_root]
    assert {t["trace_id"] for t in family} == {trace}
    assert tasks[other_root]["trace_id"] != trace  # a new root gets a fresh trace
    children = [t for t in family if t["parent_id"] == root_id]
    assert len(children) == 2
    result = taskq_cli("show", str(root_id), "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("tree.child") == 2 and "tree.grandchild" in result.stdout
    as_json = json.loads(taskq_cli("show", str(root_id), "--json", "--dsn", dsn).stdout)
    assert [n["depth"] for n in as_json["tree"]] == [0, 1, 1, 2]


def _blank_task(task_id: int) -> ClaimedTask:
    now = dt.datetime.now(dt.UTC)
    return ClaimedTask(
        id=task_id,
        task_type="t",
        queue="default",
        biz_id=None,
        payload={},
        priority=0,
        retry_count=0,
        max_retry_count=5,
        timeout_seconds=60,
        effective_id=uuid.uuid4(),
        trace_id=None,
        created_at=now,
        scheduled_at=now,
        started_at=now,
    )


def test_context_helpers_refuse_the_wrong_flavour() -> None:
    from taskq.progress import ProgressReporter

    loop = asyncio.new_event_loop()
    try:
        task = _blank_task(1)

        async def write(value: str) -> bool:
            return True

        ctx = taskq.TaskContext(
            task, worker_id="w", reporter=lambda _task: ProgressReporter(loop, write)
        )
        with pytest.raises(taskq.TaskqError, match="idempotent"):
            _ = ctx.conn

        async def on_loop() -> None:
            with pytest.raises(taskq.TaskqError, match=r"await ctx\.acheckpoint"):
                ctx.checkpoint("x")

        loop.run_until_complete(on_loop())
    finally:
        loop.close()


# --- periodic tasks --------------------------------------------------------------------------

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "catch_up,limit,run,missed",
    [
        ("skip", 10, [], list(range(1, 12))),
        ("run_once", 10, [11], list(range(1, 11))),
        ("backfill", 3, [9, 10, 11], list(range(1, 9))),
    ],
)
def test_catch_up_policies(catch_up: Any, limit: int, run: list[int], missed: list[int]) -> None:
    """Eleven ticks of a five-minute schedule passed while no worker ran; the newest is two
    minutes old, past the 60 s misfire grace, so all eleven are late."""
    schedule = Schedule("s", "t", "*/5 * * * *", catch_up=catch_up, backfill_limit=limit)
    decided = plan(schedule, after=T0, now=T0 + dt.timedelta(minutes=57))
    five = dt.timedelta(minutes=5)
    assert decided.run == [T0 + n * five for n in run]
    assert decided.missed == [T0 + n * five for n in missed]
    assert decided.next_tick == T0 + 12 * five


def test_on_time_ticks_run_and_intervals_align_to_the_epoch() -> None:
    schedule = Schedule("s", "t", "every 15m")
    decided = plan(schedule, after=T0, now=T0 + dt.timedelta(minutes=15, seconds=2))
    assert decided.run == [T0 + dt.timedelta(minutes=15)] and decided.missed == []
    berlin = Schedule("b", "t", "30 2 * * *", timezone="Europe/Berlin")
    # 2026-03-29 02:30 does not exist in Berlin (DST): cronsim's rule, not ours, decides.
    spring = plan(
        berlin,
        after=dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC),
        now=dt.datetime(2026, 3, 28, 12, 0, 1, tzinfo=dt.UTC),
    )
    assert spring.next_tick.tzinfo is not None


def test_bad_schedules_are_refused() -> None:
    app = taskq.App(dsn="unused")
    with pytest.raises(taskq.ConfigError, match="cron"):
        app.periodic("61 * * * *", task_type="x")
    with pytest.raises(taskq.ConfigError, match="time zone"):
        app.periodic("* * * * *", task_type="x", timezone="Mars/Olympus")
    with pytest.raises(taskq.ConfigError, match="interval"):
        app.periodic("every soon", task_type="x")


@pytest.mark.slow
def test_each_tick_is_enqueued_once_however_many_workers(dsn: str) -> None:
    """Eight schedulers race over a schedule whose last 20 minutes of ticks are due."""
    app = taskq.App(dsn=dsn)

    @app.periodic("* * * * *", catch_up="backfill", backfill_limit=5)
    @app.task("cron.report")
    def report(ctx: taskq.TaskContext, payload: Any) -> None: ...

    [schedule] = app.schedules.values()
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_schedule(conn, app, schedule)  # creates the row; ticks count from now
        conn.execute("UPDATE taskq.schedules SET since = now() - interval '20 minutes'")
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def race() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                barrier.wait(10)
                run_schedule(conn, app, schedule)
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    ticks = rows(dsn, "SELECT tick, outcome, task_id FROM taskq.schedule_ticks ORDER BY tick")
    assert 19 <= len(ticks) <= 21
    enqueued = [t for t in ticks if t["outcome"] == "enqueued"]
    missed = [t for t in ticks if t["outcome"] == "missed"]
    assert 5 <= len(enqueued) <= 6  # the backfill limit (+ one tick still within its grace)
    tasks = rows(dsn, "SELECT id, scheduled_at FROM taskq.tasks ORDER BY id")
    assert [t["id"] for t in tasks] == [t["task_id"] for t in enqueued]
    assert [t["scheduled_at"] for t in tasks] == [t["tick"] for t in enqueued]
    [state] = rows(dsn, "SELECT missed_total, last_tick, next_tick FROM taskq.schedules")
    assert state["missed_total"] == len(missed)
    assert state["next_tick"] > state["last_tick"]


@pytest.mark.slow
async def test_a_schedule_fires_in_running_workers(dsn: str, worker_factory: Any) -> None:
    app = taskq.App(dsn=dsn)
    fired: list[int] = []

    @app.periodic("every 1s", task_type="cron.tick", payload={"hello": "world"})
    async def tick(ctx: taskq.TaskContext, payload: Any) -> None:
        assert payload == {"hello": "world"}
        fired.append(ctx.task_id)

    await worker_factory(app, poll_interval_seconds=0.2)
    await worker_factory(app, poll_interval_seconds=0.2)
    await wait_until(lambda: len(fired) >= 3, what="three ticks")
    ticks = rows(dsn, "SELECT tick, task_id FROM taskq.schedule_ticks WHERE outcome = 'enqueued'")
    assert len({t["tick"] for t in ticks}) == len(ticks) == count(dsn, "task_type = 'cron.tick'")
    listed = taskq_cli("schedules", "--dsn", dsn)
    assert listed.returncode == 0 and "cron.tick@every 1s" in listed.stdout


# --- reconciliation --------------------------------------------------------------------------


@pytest.mark.slow
def test_reconcile_enqueues_only_what_is_missing(dsn: str) -> None:
    execute(dsn, "CREATE TABLE orders (id int PRIMARY KEY)")
    rows(dsn, "INSERT INTO orders SELECT generate_series(1, 5) RETURNING id")
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn) as conn:
        app.enqueue(conn, "sem.welcome", {"order": 1}, biz_id="1")
        done = app.enqueue(conn, "sem.welcome", {"order": 2}, biz_id="2")
        conn.execute("UPDATE taskq.tasks SET status = 'SUCCESS' WHERE id = %s", (done,))
    spec = "tests.apps.semantics:app"
    dry = json.loads(
        taskq_cli("reconcile", "--app", spec, "--dry-run", "--json", "--dsn", dsn).stdout
    )
    assert dry[0]["missing"] == ["3", "4", "5"] and dry[0]["enqueued"] == []
    assert count(dsn) == 2
    first = taskq_cli("reconcile", "sem.welcome", "--app", spec, "--dsn", dsn)
    assert first.returncode == 0 and "3 missing; enqueued 3" in first.stdout
    again = taskq_cli("reconcile", "--app", spec, "--dsn", dsn)
    assert "0 missing; enqueued 0" in again.stdout
    assert sorted(r["biz_id"] for r in rows(dsn, "SELECT biz_id FROM taskq.tasks")) == [
        "1",
        "2",
        "3",
        "4",
        "5",
    ]
    payload = rows(dsn, "SELECT payload FROM taskq.tasks WHERE biz_id = '4'")[0]["payload"]
    assert payload == {"order": 4}


def test_reconciler_runs_as_a_scheduled_task(dsn: str) -> None:
    from tests.apps.semantics import app

    assert "reconcile:sem.welcome" in app.schedules
    assert app.schedules["reconcile:sem.welcome"].task_type == "taskq.reconcile"
    assert "taskq.reconcile" in app.tasks
    unknown = taskq_cli("reconcile", "nope", "--app", "tests.apps.semantics:app", "--dsn", dsn)
    assert unknown.returncode == 1 and "no reconciler named 'nope'" in unknown.stderr


def test_requeue_refuses_to_break_uniqueness(dsn: str) -> None:
    app = taskq.App(dsn=dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        dead = app.enqueue(conn, "mail.send", unique_key="k")
        conn.execute("UPDATE taskq.tasks SET status = 'DEAD_LETTER' WHERE id = %s", (dead,))
        app.enqueue(conn, "mail.send", unique_key="k")  # a new live one takes the key
    result = taskq_cli("dlq", "requeue", str(dead), "--dsn", dsn)
    assert result.returncode == 1
    assert "a live task holds the same unique key" in result.stderr
    assert "Traceback" not in result.stderr
    assert status_of(dsn, dead)["status"] == "DEAD_LETTER"


async def test_enqueue_without_the_schema_says_run_taskq_migrate(empty_dsn: str) -> None:
    """Sync and async, the public enqueue turns the missing table into one clear error."""
    app = taskq.App(dsn=empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        with pytest.raises(taskq.SchemaMissing, match="migrate"):
            app.enqueue(conn, "some.type", {"a": 1})
        with pytest.raises(taskq.SchemaMissing, match="migrate"):
            app.enqueue_many(conn, [{"task_type": "some.type"}])
    async with await psycopg.AsyncConnection.connect(empty_dsn, autocommit=True) as aconn:
        with pytest.raises(taskq.SchemaMissing, match="migrate"):
            await app.enqueue(aconn, "some.type", {"a": 1})
