"""The queue table's statistics where autovacuum does not keep them (sql/ddl/0033): the
leader's ANALYZE when the table changed enough, so that plans prepared on a small table are
made again for the table as it grew."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import structlog

import taskq
from taskq.db import store
from taskq.db.sqlfiles import query
from tests.support import explain_from_now, plans_in_notices, rows, scans_of_tasks, wait_until


def _write(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """One statement, its counts sent to the statistics system before this returns (a backend
    sends them when it goes idle, at most once a second unless forced)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)  # type: ignore[arg-type]
        conn.execute("SELECT pg_stat_force_next_flush()")


def _add(dsn: str, n: int) -> None:
    _write(
        dsn,
        "INSERT INTO taskq.tasks (task_type, status) SELECT 'old', 'SUCCESS'"
        " FROM generate_series(1, %s)",
        (n,),
    )


def _reltuples(dsn: str) -> float:
    [row] = rows(dsn, "SELECT reltuples FROM pg_class WHERE oid = 'taskq.tasks'::regclass")
    return float(row["reltuples"])


async def _analyze(dsn: str) -> bool:
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=psycopg.rows.dict_row
    ) as conn:
        return await store.analyze_when_stale(conn)


def _autovacuum(dsn: str, enabled: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE taskq.tasks SET (autovacuum_enabled = true)"
            if enabled
            else "ALTER TABLE taskq.tasks SET (autovacuum_enabled = false)"
        )
        conn.execute("VACUUM ANALYZE taskq.tasks")


async def test_it_analyzes_once_the_table_grew_or_shrank_by_half(dsn: str) -> None:
    """Autovacuum off for the table: within 1,000 rows and half the planner's count nothing
    happens; past it, one ANALYZE, and nothing again until the size moves that much again."""
    _autovacuum(dsn, enabled=False)
    _add(dsn, 900)
    assert await _analyze(dsn) is False
    assert _reltuples(dsn) == 0
    _add(dsn, 200)
    assert await _analyze(dsn) is True
    assert _reltuples(dsn) == 1100
    assert await _analyze(dsn) is False
    _add(dsn, 1400)  # 2,500 against 1,100: not more than 1,000 + 550 apart
    assert await _analyze(dsn) is False
    _add(dsn, 600)  # 3,100: now they are
    assert await _analyze(dsn) is True
    _write(dsn, "DELETE FROM taskq.tasks WHERE id %% 10 <> 0")  # shrunk to 310
    assert await _analyze(dsn) is True
    assert _reltuples(dsn) == 310


async def test_churn_without_growth_is_left_alone(dsn: str) -> None:
    """A queue whose size holds still changes by UPDATEs only: no ANALYZE (each makes every
    session plan its statements again), however many."""
    _autovacuum(dsn, enabled=False)
    _add(dsn, 5000)
    assert await _analyze(dsn) is True
    for status in ("PENDING", "PROCESSING", "SUCCESS", "PENDING"):
        _write(dsn, "UPDATE taskq.tasks SET status = %s", (status,))
    [seen] = rows(
        dsn,
        "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = 'taskq.tasks'::regclass",
    )
    assert seen["n_mod_since_analyze"] == 20000  # the churn is counted, and left alone
    assert await _analyze(dsn) is False


async def test_it_leaves_the_table_to_autovacuum_where_that_runs(dsn: str) -> None:
    [setting] = rows(dsn, "SELECT current_setting('autovacuum') AS on")
    if setting["on"] != "on":
        pytest.skip("autovacuum is off on this server: nothing covers the table but taskq")
    _autovacuum(dsn, enabled=True)
    _add(dsn, 5000)
    assert await _analyze(dsn) is False


async def test_plans_prepared_on_an_empty_table_follow_it_once_analyzed(dsn: str) -> None:
    """The backlog gauge, prepared by a session while the table was empty: a sequential scan,
    kept while 20,000 rows arrive (without an ANALYZE); made again after the upkeep's."""
    _autovacuum(dsn, enabled=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(12):  # prepared at the sixth, generic after five custom plans
            conn.execute(query("backlog"), prepare=True).fetchall()
        _add(dsn, 20000)
        notices = explain_from_now(conn)

        def reads() -> list[tuple[str, str | None, bool]]:
            notices.clear()
            conn.execute(query("backlog"), prepare=True).fetchall()
            return [r for p in plans_in_notices(notices) for r in scans_of_tasks(p)]

        assert [r[0] for r in reads()] == ["Seq Scan"]
        assert await _analyze(dsn) is True
        after = reads()
        assert after and not [r for r in after if r[0] == "Seq Scan"], after


def _app(dsn: str) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("stats.noop")
    def noop(ctx: taskq.TaskContext, payload: Any) -> None:
        return None

    return app


async def test_the_leader_keeps_the_statistics(dsn: str, worker_factory: Any) -> None:
    _autovacuum(dsn, enabled=False)
    _add(dsn, 2000)
    await worker_factory(_app(dsn))
    await wait_until(lambda: _reltuples(dsn) == 2000, what="the leader's ANALYZE")


async def test_a_schema_before_the_upkeep_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers upgraded before ``taskq migrate``: the function is missing. One warning, then
    the leader stops asking (no error every half minute)."""
    calls: list[object] = []

    async def missing(conn: object) -> bool:
        calls.append(conn)
        raise psycopg.errors.UndefinedFunction(
            "function taskq.analyze_when_stale_v1() does not exist"
        )

    class Pool:
        @contextlib.asynccontextmanager
        async def connection(self) -> AsyncIterator[object]:
            yield object()

    monkeypatch.setattr(store, "analyze_when_stale", missing)
    worker = taskq.Worker(_app("postgresql://unused"), dsn="postgresql://unused")
    with structlog.testing.capture_logs() as logs:
        await worker._analyze(Pool())  # type: ignore[arg-type]
        await worker._analyze(Pool())  # type: ignore[arg-type]
    assert len(calls) == 1
    assert [e["event"] for e in logs] == ["statistics_upkeep_unavailable"]
