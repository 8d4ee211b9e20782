"""The statements of sql/queries/finish.sql against a real database: every move out of
PROCESSING."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from taskq.app import TaskOptions
from taskq.db import store
from taskq.db.connection import KeptConnection
from taskq.db.store import finish as finish_store
from taskq.worker.completer import Completer
from taskq.worker.completer import reap as completer_reap
from taskq.worker.heartbeat import Heartbeat
from tests import factories
from tests.support import (
    aexplain_from_now,
    explain_from_now,
    plans_in_notices,
    rows,
    scans_of_tasks,
)


def processing(dsn: str, n: int = 1, **columns: Any) -> list[tuple[int, uuid.UUID]]:
    """``n`` PROCESSING rows (an attempt each); ``columns`` override the defaults."""
    values = {
        "task_type": "job.x",
        "queue": "default",
        "worker_id": "w1",
        "started_at": "now",
        "max_retry_count": 5,
        "timeout_seconds": 60,
        **columns,
    }
    found = rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, queue, status, worker_id, effective_id, started_at,"
        " max_retry_count, timeout_seconds)"
        " SELECT %(task_type)s, %(queue)s, 'PROCESSING', %(worker_id)s, gen_random_uuid(),"
        " %(started_at)s::timestamptz, %(max_retry_count)s, %(timeout_seconds)s"
        " FROM generate_series(1, %(n)s) RETURNING id, effective_id",
        {**values, "n": n},
    )
    return [(r["id"], r["effective_id"]) for r in found]


async def aconnect(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)


async def test_the_reaper_rescues_a_processing_row_without_started_at(dsn: str) -> None:
    """Written by hand or by a foreign producer: no started_at, no worker. It must not escape
    every rule: judged by updated_at."""
    [(task_id, _)] = processing(dsn, worker_id=None, started_at=None)
    rows(
        dsn,
        "UPDATE taskq.tasks SET updated_at = now() - interval '1 hour' WHERE id = %s RETURNING id",
        (task_id,),
    )
    async with await aconnect(dsn) as conn:
        rescued = await store.reap_attempts(conn, grace_seconds=10, orphan_after_seconds=30)
    assert [r["id"] for r in rescued] == [task_id]
    [row] = rows(dsn, "SELECT status, retry_count FROM taskq.tasks WHERE id = %s", (task_id,))
    assert row == {"status": "FAILED", "retry_count": 1}


async def test_the_reaper_leaves_a_fresh_row_without_started_at_alone(dsn: str) -> None:
    processing(dsn, worker_id=None, started_at=None)
    async with await aconnect(dsn) as conn:
        assert await store.reap_attempts(conn, grace_seconds=10, orphan_after_seconds=30) == []


async def test_a_release_is_uncharged_and_wakes_the_queue(dsn: str) -> None:
    [(task_id, token)] = processing(dsn, queue="sms")
    async with await aconnect(dsn) as listener, await aconnect(dsn) as conn:
        await listener.execute("LISTEN taskq_tasks")
        assert await store.release_many(conn, [task_id], [token]) == [task_id]
        gen = listener.notifies(timeout=5)
        note = await anext(gen)
        await gen.aclose()
    assert note.payload == '["sms"]'
    [row] = rows(dsn, "SELECT * FROM taskq.tasks WHERE id = %s", (task_id,))
    assert row["status"] == "PENDING" and row["retry_count"] == 0
    assert row["effective_id"] is None and row["worker_id"] is None


async def test_a_batch_of_failures_opens_a_breaker_in_one_statement(dsn: str) -> None:
    attempts = processing(dsn, n=5, task_type="job.down")
    n = len(attempts)
    async with await aconnect(dsn) as conn:
        finished = await store.mark_failed_many(
            conn,
            ids=[a[0] for a in attempts],
            tokens=[a[1] for a in attempts],
            errors=["RuntimeError: down"] * n,
            after_seconds=[None] * n,
            delay_seconds=[60.0] * n,
            jitter_seconds=[0.0] * n,
            counts_for_breaker=[True] * n,
            breaker_threshold=5,
        )
    assert {f.status for f in finished.values()} == {"FAILED"} and len(finished) == 5
    [breaker] = rows(dsn, "SELECT * FROM taskq.breakers WHERE task_type = 'job.down'")
    assert breaker["state"] == "OPEN" and breaker["consecutive_failures"] == 5
    assert breaker["reason"] == "5 consecutive failures"


async def test_a_retry_is_not_a_breaker_failure_and_exhaustion_dead_letters(dsn: str) -> None:
    [(last, last_token)] = processing(dsn, max_retry_count=0)
    [(snooze, snooze_token)] = processing(dsn)
    async with await aconnect(dsn) as conn:
        finished = await store.mark_failed_many(
            conn,
            ids=[last, snooze],
            tokens=[last_token, snooze_token],
            errors=["RuntimeError: x", "Retry: later"],
            after_seconds=[None, 3600.0],
            delay_seconds=[60.0, 60.0],
            jitter_seconds=[0.0, 0.0],
            counts_for_breaker=[True, False],
            breaker_threshold=5,
        )
    assert finished[last].status == "DEAD_LETTER" and finished[snooze].status == "FAILED"
    [breaker] = rows(dsn, "SELECT consecutive_failures FROM taskq.breakers")
    assert breaker["consecutive_failures"] == 1
    outcomes = rows(dsn, "SELECT outcome, n FROM taskq.task_stats ORDER BY outcome")
    assert outcomes == [{"outcome": "dead_lettered", "n": 1}, {"outcome": "retried", "n": 1}]


async def test_an_idempotent_commit_heals_a_half_open_breaker(dsn: str) -> None:
    """The idempotent path runs mark_success_many for its one attempt, so its success closes a
    HALF_OPEN breaker (its probe) like any batched success."""
    rows(
        dsn,
        "INSERT INTO taskq.breakers (task_type, state, consecutive_failures)"
        " VALUES ('job.x', 'HALF_OPEN', 7) RETURNING task_type",
    )
    [(task_id, token)] = processing(dsn)
    with psycopg.connect(dsn) as conn, conn.transaction():
        assert store.mark_success_in_transaction(conn, task_id, token, outcome="success")
    [breaker] = rows(dsn, "SELECT state, consecutive_failures FROM taskq.breakers")
    assert breaker == {"state": "CLOSED", "consecutive_failures": 0}


# --- the reaper's crash judgement (sql/ddl/0017_crash_isolation.sql) ---------------------------


def crash_state(dsn: str, ids: list[int]) -> list[dict[str, Any]]:
    return rows(
        dsn,
        "SELECT id, status, retry_count, crash_count, isolate, worker_id, effective_id,"
        " last_error FROM taskq.tasks WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    )


async def reap(dsn: str, crash_limit: int = 3) -> list[dict[str, Any]]:
    async with await aconnect(dsn) as conn:
        return await store.reap_attempts(
            conn, grace_seconds=10, orphan_after_seconds=30, crash_limit=crash_limit
        )


async def test_a_crash_beside_others_charges_none_and_isolates_each(dsn: str) -> None:
    """A dead worker held three attempts: any of them may have killed the process, so none is
    charged. Each goes back to PENDING, crash_count 1, to run alone next time."""
    factories.worker(dsn, "dead", heartbeat_ago=60, lease_seconds=30)
    ids = [task_id for task_id, _ in processing(dsn, 3, worker_id="dead", max_retry_count=0)]
    rescued = await reap(dsn)
    assert sorted(r["id"] for r in rescued) == ids
    assert {(r["status"], r["worker_id"]) for r in rescued} == {("PENDING", "dead")}
    for row in crash_state(dsn, ids):
        assert row["status"] == "PENDING" and row["retry_count"] == 0, row
        assert row["crash_count"] == 1 and row["isolate"], row
        assert row["worker_id"] is None and row["effective_id"] is None, row
        assert row["last_error"].startswith("WorkerLost: worker dead stopped heart-beating while")
        assert "not charged" in row["last_error"]


async def test_a_crash_alone_is_charged(dsn: str) -> None:
    """The only attempt of the dead worker was the crash: charged a retry, and dead-lettered
    once its retries are spent; it stays isolate."""
    factories.worker(dsn, "dead", heartbeat_ago=60, lease_seconds=30)
    factories.worker(dsn, "dead2", heartbeat_ago=60, lease_seconds=30)
    [(first, _)] = processing(dsn, worker_id="dead", max_retry_count=1)
    [(spent, _)] = processing(dsn, worker_id="dead2", max_retry_count=1)
    rows(dsn, "UPDATE taskq.tasks SET retry_count = 1 WHERE id = %s RETURNING id", (spent,))
    await reap(dsn)
    one, two = crash_state(dsn, [first, spent])
    assert (one["status"], one["retry_count"], one["crash_count"], one["isolate"]) == (
        "FAILED",
        1,
        1,
        True,
    )
    assert (two["status"], two["retry_count"], two["crash_count"], two["isolate"]) == (
        "DEAD_LETTER",
        1,
        1,
        True,
    )
    for row in (one, two):
        assert row["last_error"].startswith(
            "WorkerLost: the process died while running this task alone"
        ), row


async def test_the_crowded_crash_past_the_limit_is_charged(dsn: str) -> None:
    """A task that keeps dying beside others (never run alone) cannot loop forever."""
    factories.worker(dsn, "dead", heartbeat_ago=60, lease_seconds=30)
    ids = [task_id for task_id, _ in processing(dsn, 2, worker_id="dead")]
    rows(dsn, "UPDATE taskq.tasks SET crash_count = 2 WHERE id = %s RETURNING id", (ids[0],))
    await reap(dsn, crash_limit=2)
    limited, free = crash_state(dsn, ids)
    assert (limited["status"], limited["retry_count"], limited["crash_count"]) == ("FAILED", 1, 3)
    assert "charged past the limit of 2" in limited["last_error"]
    assert (free["status"], free["retry_count"], free["crash_count"]) == ("PENDING", 0, 1)


async def test_a_timeout_on_a_live_worker_is_no_crash(dsn: str) -> None:
    factories.worker(dsn, "alive", heartbeat_ago=0, lease_seconds=30)
    ids = [
        task_id
        for task_id, _ in processing(
            dsn, 2, worker_id="alive", timeout_seconds=1, started_at="2000-01-01"
        )
    ]
    await reap(dsn)
    for row in crash_state(dsn, ids):
        assert (row["status"], row["retry_count"], row["crash_count"], row["isolate"]) == (
            "FAILED",
            1,
            0,
            False,
        ), row
        assert row["last_error"].startswith("TimedOut")


async def test_a_handler_outcome_clears_isolate(dsn: str) -> None:
    pairs = processing(dsn, 3)
    ids = [task_id for task_id, _ in pairs]
    rows(dsn, "UPDATE taskq.tasks SET isolate = true WHERE id = ANY(%s) RETURNING id", (ids,))
    async with await aconnect(dsn) as conn:
        await store.mark_success_many(conn, [pairs[0][0]], [pairs[0][1]])
        await store.mark_failed_many(
            conn,
            ids=[pairs[1][0]],
            tokens=[pairs[1][1]],
            errors=["boom"],
            after_seconds=[None],
            delay_seconds=[1.0],
            jitter_seconds=[0.0],
            counts_for_breaker=[True],
            breaker_threshold=5,
        )
        await store.mark_dead_many(conn, ids=[pairs[2][0]], tokens=[pairs[2][1]], errors=["bad"])
    assert [r["isolate"] for r in crash_state(dsn, ids)] == [False, False, False]


# --- each row's own entry, and plans that keep to the primary key ------------------------------


async def test_a_batch_in_any_order_with_an_id_twice_writes_each_rows_own_entry(dsn: str) -> None:
    """finish.sql finds a row's entry by binary search over the ids: the store sends the batch
    sorted, each id once per statement. Out of order here, and one row twice: its attempt taken
    away (a stale token) and its next attempt, both ended in the same flush."""
    attempts = processing(dsn, n=6)
    stale = uuid.uuid4()
    batch = [*reversed(attempts), (attempts[2][0], stale)]
    batch[1], batch[4] = batch[4], batch[1]
    n = len(batch)
    async with await aconnect(dsn) as conn:
        finished = await store.mark_failed_many(
            conn,
            ids=[i for i, _ in batch],
            tokens=[t for _, t in batch],
            errors=[f"error of {t}" for _, t in batch],
            after_seconds=[float(i) for i, _ in batch],
            delay_seconds=[0.0] * n,
            jitter_seconds=[0.0] * n,
            counts_for_breaker=[i % 2 == 0 for i, _ in batch],
            breaker_threshold=0,
        )
    assert set(finished) == {i for i, _ in attempts}
    found = rows(
        dsn,
        "SELECT id, last_error, next_retry_time - finished_at AS after FROM taskq.tasks",
    )
    for row in found:
        token = dict(attempts)[row["id"]]
        assert row["last_error"] == f"error of {token}", row
        assert row["after"].total_seconds() == pytest.approx(row["id"], abs=0.01), row
    counted = rows(dsn, "SELECT outcome, n FROM taskq.task_stats ORDER BY outcome")
    evens = sum(1 for i, _ in attempts if i % 2 == 0)
    assert counted == [
        {"outcome": "failed", "n": evens},
        {"outcome": "retried", "n": 6 - evens},
    ]


async def test_a_success_batch_in_any_order_finds_every_attempt(dsn: str) -> None:
    attempts = processing(dsn, n=40)
    batch = attempts[::3] + attempts[1::3] + attempts[2::3]
    async with await aconnect(dsn) as conn:
        won = await store.mark_success_many(conn, [i for i, _ in batch], [t for _, t in batch])
        lost = await store.release_many(conn, [i for i, _ in batch], [t for _, t in batch])
    assert won == {i for i, _ in attempts} and lost == []
    assert {r["status"] for r in rows(dsn, "SELECT status FROM taskq.tasks")} == {"SUCCESS"}


def test_the_store_sends_each_id_once_per_statement_in_id_order() -> None:
    rounds = finish_store._rounds([5, 3, 9, 3, 3, 1], ["a", "b", "c", "d", "e", "f"])
    assert rounds == [
        [[1, 3, 5, 9], ["f", "b", "a", "c"]],
        [[3], ["d"]],
        [[3], ["e"]],
    ]
    assert finish_store._rounds([], []) == [[[], []]]


def _small_table_first(dsn: str, first_rows: int) -> None:
    """Statistics from an earlier, larger table, no blocks, then ``first_rows`` rows the
    statistics do not know of: what a worker starting on a new or emptied queue plans on."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskq.tasks (task_type) SELECT 'old' FROM generate_series(1, 3000)"
        )
        conn.execute("ANALYZE taskq.tasks")
        conn.execute("TRUNCATE taskq.tasks")
        conn.execute("VACUUM ANALYZE taskq.tasks")
        if first_rows:
            conn.execute(
                "INSERT INTO taskq.tasks (task_type, status) SELECT 'old', 'SUCCESS'"
                " FROM generate_series(1, %s)",
                (first_rows,),
            )


def _grow(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, status) SELECT 'old', 'SUCCESS'"
            " FROM generate_series(1, 20000)"
        )


def _through_the_primary_key(reads: list[tuple[str, str | None, bool]], notices: Any) -> None:
    """No sequential scan, and every index read of tasks is of tasks_pkey with a condition
    (an index scan, or the bitmap scan under a bitmap heap scan)."""
    assert reads, notices
    assert not [r for r in reads if r[0] == "Seq Scan"], reads
    assert [r for r in reads if r[1]], reads
    assert all(r[1] == "tasks_pkey" and r[2] for r in reads if r[1]), reads


async def _complete(conn: psycopg.AsyncConnection[Any], dsn: str, kind: str) -> int:
    """One batch of three attempts ended as ``kind``, through the store; rows matched."""
    attempts = processing(dsn, n=3)
    ids, tokens = [i for i, _ in attempts], [t for _, t in attempts]
    if kind == "success":
        return len(await store.mark_success_many(conn, ids, tokens))
    if kind == "failed":
        return len(
            await store.mark_failed_many(
                conn,
                ids=ids,
                tokens=tokens,
                errors=["e"] * 3,
                after_seconds=[None] * 3,
                delay_seconds=[1.0] * 3,
                jitter_seconds=[0.0] * 3,
                counts_for_breaker=[False] * 3,
                breaker_threshold=0,
            )
        )
    if kind == "dead":
        return len(await store.mark_dead_many(conn, ids=ids, tokens=tokens, errors=["e"] * 3))
    if kind == "cancelled":
        return len(await store.mark_cancelled_many(conn, ids, tokens))
    return len(await store.release_many(conn, ids, tokens))


@pytest.mark.parametrize("first_rows", [0, 300])
@pytest.mark.parametrize("kind", ["success", "failed", "dead", "cancelled", "released"])
async def test_the_completer_first_planned_on_a_small_table_keeps_to_the_primary_key(
    dsn: str, kind: str, first_rows: int
) -> None:
    """The completer's statements are prepared after five runs and the session keeps one
    generic plan, replanned only after an ANALYZE (never, with autovacuum off). Made on an
    empty or small table, it read the whole table at every batch as the table grew (a 32-row
    success on 100,000 rows: 19 ms). On the completer's kept connection, whatever the table was
    at the first batches, each read of tasks is bounded by an index condition."""
    _small_table_first(dsn, first_rows)
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    try:
        completer = Completer(pool, lambda t: TaskOptions(t), worker_id="w")
        async with completer._conn.use() as conn:
            for _ in range(12):  # prepared at the sixth, generic after five custom plans
                assert await _complete(conn, dsn, kind) == 3
            _grow(dsn)
            notices = await aexplain_from_now(conn)
            assert await _complete(conn, dsn, kind) == 3
            await conn.execute("SET auto_explain.log_min_duration = -1")
        reads = [r for p in plans_in_notices(notices) for r in scans_of_tasks(p)]
        _through_the_primary_key(reads, notices)
        await completer._conn.give_back()
    finally:
        await pool.close()


@pytest.mark.parametrize("first_rows", [0, 300])
def test_an_idempotent_commit_first_planned_on_a_small_table_keeps_to_the_primary_key(
    dsn: str, first_rows: int
) -> None:
    """The same statement in an idempotent handler's transaction, on any pooled connection:
    planned there with the completer's settings, for that transaction only."""
    _small_table_first(dsn, first_rows)
    with psycopg.connect(dsn, autocommit=True) as conn:  # as the pool's connections are
        for _ in range(12):
            [(task_id, token)] = processing(dsn)
            with conn.transaction():
                assert store.mark_success_in_transaction(conn, task_id, token, outcome="success")
        _grow(dsn)
        notices = explain_from_now(conn)
        [(task_id, token)] = processing(dsn)
        with conn.transaction():
            assert store.mark_success_in_transaction(conn, task_id, token, outcome="success")
        assert conn.execute("SHOW enable_seqscan").fetchone() == ("on",)  # local to it
    reads = [r for p in plans_in_notices(notices) for r in scans_of_tasks(p)]
    _through_the_primary_key(reads, notices)


@pytest.mark.parametrize("first_rows", [0, 300])
async def test_the_reaper_first_planned_on_a_small_table_keeps_to_the_indexes(
    dsn: str, first_rows: int
) -> None:
    """The reaper takes whichever pooled connection is free, and the pass's statement is
    prepared there like any other: made on an empty table, its plan read the whole table at
    every pass (a sequential scan, or with sequential scans off the UPDATE's join to the
    judged rows as a full scan of tasks_pkey: 42-70 ms a pass on 200,000 rows, against about
    1 ms). Each read of tasks is bounded: by an index condition, or by a partial index's
    predicate (the in-flight rows)."""
    _small_table_first(dsn, first_rows)
    with psycopg.connect(dsn, autocommit=True) as c:
        partial = {
            r[0]
            for r in c.execute(
                "SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = 'taskq.tasks'::regclass AND i.indpred IS NOT NULL"
            )
        }
    async with await aconnect(dsn) as conn:
        for _ in range(12):
            await completer_reap(conn, grace_seconds=10, orphan_after_seconds=30)
        _grow(dsn)
        lost = processing(dsn, n=3, worker_id=None, started_at="2000-01-01T00:00:00Z")
        notices = await aexplain_from_now(conn)
        rescued, _ = await completer_reap(conn, grace_seconds=10, orphan_after_seconds=30)
        assert sorted(r["id"] for r in rescued) == sorted(i for i, _ in lost)
    reads = [r for p in plans_in_notices(notices) for r in scans_of_tasks(p)]
    assert reads, notices
    assert not [r for r in reads if r[0] == "Seq Scan"], reads
    assert all(r[2] or r[1] in partial for r in reads if r[1]), reads


@pytest.mark.parametrize("first_rows", [0, 300])
def test_the_heartbeat_first_planned_on_a_small_table_keeps_to_the_indexes(
    dsn: str, first_rows: int
) -> None:
    """The heartbeat's statements (the lease, its lost and stray look-ups, the abort fallback)
    are prepared on its connection of its own: made on an empty table they read the whole
    table at every beat once it grew (62 + 48 ms a beat on 200,000 rows, against about 1 ms).
    Its answers stay right: a presented attempt whose token is stale is lost, a PROCESSING row
    it did not present is a stray, and an abort request is seen."""
    _small_table_first(dsn, first_rows)
    aborted: list[list[int]] = []
    lost: list[list[int]] = []
    mine = processing(dsn, n=2, worker_id="hb")
    held = [*mine, (mine[0][0], uuid.uuid4())]  # and a stale attempt of the first row
    heartbeat = Heartbeat(
        dsn,
        worker_id="hb",
        queues={"default": 1},
        interval_seconds=10,
        lease_seconds=30,
        held=lambda: held,
        on_lost=lost.append,
        on_abort=aborted.append,
        loop_silence=lambda: 0.0,
        session_settings=store.PLANNER_SETTINGS,
    )
    try:
        for _ in range(12):  # prepared at the sixth, generic after five custom plans
            assert heartbeat.run_once() == [mine[0][0]]
        _grow(dsn)
        [(stray, _)] = processing(dsn, n=1, worker_id="hb")
        rows(
            dsn,
            "UPDATE taskq.tasks SET abort_requested_at = now() WHERE id = %s RETURNING id",
            (mine[1][0],),
        )
        strays: list[list[tuple[int, uuid.UUID]]] = []
        heartbeat._on_strays = strays.append
        notices = explain_from_now(heartbeat._connection())
        assert heartbeat.run_once() == [mine[0][0]]
    finally:
        heartbeat.stop(unregister=True)
    assert [[i for i, _ in s] for s in strays] == [[stray]]
    assert aborted[-1] == [mine[1][0]] and len(lost) == 13
    reads = [r for p in plans_in_notices(notices) for r in scans_of_tasks(p)]
    assert reads, notices
    assert not [r for r in reads if r[0] == "Seq Scan"], reads
    assert all(r[2] or r[1] == "tasks_processing_idx" for r in reads if r[1]), reads


async def test_the_completers_settings_stay_with_the_completer(dsn: str) -> None:
    """Its kept connection plans with enable_seqscan off; given back to the pool, where it
    serves handlers, the setting is reset."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True)
    try:
        kept = KeptConnection(pool, settings=store.PLANNER_SETTINGS)
        async with kept.use() as conn:
            assert await (await conn.execute("SHOW enable_seqscan")).fetchone() == ("off",)
            await conn.execute("BEGIN")  # left open by a failed write
        await kept.give_back()
        async with pool.connection() as conn:
            assert await (await conn.execute("SHOW enable_seqscan")).fetchone() == ("on",)
        async with kept.use() as conn:  # taken again: set again
            assert await (await conn.execute("SHOW enable_seqscan")).fetchone() == ("off",)
        await kept.give_back()
    finally:
        await pool.close()
