"""Circuit breakers and the protection level against a real database: the statements that move
a breaker (sql/queries/finish.sql, control.sql) and ``ProtectionEvaluator.run_once`` with a
clock the test steps. Breaker times are the database clock's, so the tests backdate rows
instead of waiting."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from taskq.control.protection import ProtectionEvaluator, claim_policy
from taskq.control.state import ControlState, Level
from taskq.db import store
from taskq.model import TaskOptions
from taskq.settings import ProtectionSettings
from tests import factories
from tests.support import rows

# Every level one failing type apart, so each transition shows in the level.
THRESHOLDS = (1, 2, 3, 4)


class Clock:
    """The evaluator's calm clock, stepped by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    ) as opened:
        yield opened


def evaluator(
    pool: AsyncConnectionPool[Any], clock: Clock | None = None, **settings: Any
) -> ProtectionEvaluator:
    settings.setdefault("level_thresholds", THRESHOLDS)
    settings.setdefault("calm_seconds", 60.0)
    return ProtectionEvaluator(
        pool, ProtectionSettings(**settings), worker_id="test", clock=clock or Clock()
    )


def attempts(dsn: str, n: int, task_type: str = "job.x") -> list[tuple[int, uuid.UUID]]:
    """``n`` PROCESSING attempts of ``task_type``."""
    found = rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, queue, status, worker_id, effective_id, started_at,"
        " max_retry_count, timeout_seconds)"
        " SELECT %s, 'default', 'PROCESSING', 'w1', gen_random_uuid(), now(), 5, 60"
        " FROM generate_series(1, %s) RETURNING id, effective_id",
        (task_type, n),
    )
    return [(r["id"], r["effective_id"]) for r in found]


async def fail(dsn: str, n: int, task_type: str = "job.x", *, threshold: int = 5) -> None:
    """``n`` ordinary failures (exceptions) of ``task_type``, in one statement."""
    batch = attempts(dsn, n, task_type)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await store.mark_failed_many(
            conn,
            ids=[i for i, _ in batch],
            tokens=[t for _, t in batch],
            errors=["ConnectionError: down"] * n,
            after_seconds=[None] * n,
            delay_seconds=[60.0] * n,
            jitter_seconds=[0.0] * n,
            counts_for_breaker=[True] * n,
            breaker_threshold=threshold,
        )


async def succeed(dsn: str, n: int, task_type: str = "job.x") -> None:
    batch = attempts(dsn, n, task_type)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await store.mark_success_many(conn, [i for i, _ in batch], [t for _, t in batch])


async def permanent(dsn: str, n: int, task_type: str = "job.x") -> None:
    """``n`` attempts whose handler raised taskq.Permanent."""
    batch = attempts(dsn, n, task_type)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await store.mark_dead_many(
            conn,
            ids=[i for i, _ in batch],
            tokens=[t for _, t in batch],
            errors=["Permanent: bad input"] * n,
        )


def breaker(dsn: str, task_type: str = "job.x") -> dict[str, Any]:
    found = rows(dsn, "SELECT * FROM taskq.breakers WHERE task_type = %s", (task_type,))
    return found[0] if found else {"state": "CLOSED", "consecutive_failures": 0}


def set_breaker(dsn: str, task_type: str, state: str, *, opened_ago: float = 0.0) -> None:
    rows(
        dsn,
        "INSERT INTO taskq.breakers (task_type, state, opened_at, changed_at)"
        " VALUES (%s, %s, now() - make_interval(secs => %s), now()) RETURNING task_type",
        (task_type, state, opened_ago),
    )


def level(dsn: str) -> int:
    return int(rows(dsn, "SELECT level FROM taskq.protection")[0]["level"])


# --- taskq.Permanent is a bad task, not a sick downstream -----------------------------------


async def test_permanent_errors_are_their_own_outcome_and_trip_nothing(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    await permanent(dsn, 30)
    counted = rows(dsn, "SELECT outcome, sum(n)::int AS n FROM taskq.task_stats GROUP BY 1")
    assert counted == [{"outcome": "permanent", "n": 30}]
    assert breaker(dsn)["consecutive_failures"] == 0
    # Both breaker paths: the rate over the window, and the level the evaluator sets.
    assert await evaluator(pool).run_once() == Level.NORMAL
    assert breaker(dsn)["state"] == "CLOSED" and level(dsn) == 0


async def test_as_many_ordinary_failures_do_trip_by_rate(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """The control for the test above: the same volume of exceptions opens the breaker by rate
    (the consecutive threshold is out of reach)."""
    await fail(dsn, 25, threshold=1000)
    assert breaker(dsn)["state"] == "CLOSED"
    assert await evaluator(pool).run_once() == Level.WARNING
    assert breaker(dsn)["state"] == "OPEN"
    assert breaker(dsn)["reason"] == "100% of 25 attempts failed"


async def test_dlq_growth_counts_permanent_errors(dsn: str) -> None:
    await permanent(dsn, 2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert [int(r["n"]) for r in store.dlq_growth(conn, 15)] == [2]


# --- every breaker transition ----------------------------------------------------------------


async def test_closed_to_open_by_consecutive_failures(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    await fail(dsn, 4)
    assert breaker(dsn)["state"] == "CLOSED"
    assert await evaluator(pool).run_once() == Level.NORMAL
    await fail(dsn, 1)
    assert breaker(dsn)["state"] == "OPEN"
    assert breaker(dsn)["reason"] == "5 consecutive failures"
    assert await evaluator(pool).run_once() == Level.WARNING


async def test_closed_to_open_by_failure_rate(dsn: str, pool: AsyncConnectionPool[Any]) -> None:
    """Four failures and a success, five times: never five in a row, but 80 % failed."""
    for _ in range(5):
        await fail(dsn, 4)
        await succeed(dsn, 1)
    assert breaker(dsn)["state"] == "CLOSED"
    ev = evaluator(pool)
    assert await ev.run_once() == Level.WARNING
    assert breaker(dsn)["state"] == "OPEN"
    assert breaker(dsn)["reason"] == "80% of 25 attempts failed"


async def test_open_to_half_open_after_the_cooldown(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    set_breaker(dsn, "job.x", "OPEN", opened_ago=29)
    factories.task(dsn, task_type="job.x")  # something to probe
    ev = evaluator(pool, breaker_cooldown_seconds=30)
    assert await ev.run_once() == Level.WARNING
    assert breaker(dsn)["state"] == "OPEN"
    rows(dsn, "UPDATE taskq.breakers SET opened_at = opened_at - interval '2 s' RETURNING 1")
    assert await ev.run_once() == Level.WARNING  # HALF_OPEN, to be probed: still counts
    assert breaker(dsn)["state"] == "HALF_OPEN"
    assert breaker(dsn)["reason"] == "cool-down over: probing"


async def test_half_open_to_closed_when_the_probe_succeeds(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    set_breaker(dsn, "job.x", "HALF_OPEN")
    await succeed(dsn, 1)
    b = breaker(dsn)
    assert b["state"] == "CLOSED" and b["reason"] == "probe succeeded"
    assert b["window_from"] is not None
    assert await evaluator(pool).run_once() == Level.NORMAL


async def test_half_open_to_open_when_the_probe_fails(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    set_breaker(dsn, "job.x", "HALF_OPEN")
    await fail(dsn, 1)
    b = breaker(dsn)
    assert b["state"] == "OPEN" and b["reason"] == "probe failed"
    assert await evaluator(pool).run_once() == Level.WARNING


async def test_a_reset_sticks_although_the_window_still_holds_the_failures(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    ev = evaluator(pool, breaker_threshold=1000)
    await fail(dsn, 25, threshold=1000)
    assert await ev.run_once() == Level.WARNING
    assert breaker(dsn)["state"] == "OPEN"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert store.breaker_reset(conn, task_type="job.x", actor="op", note=None) == ["job.x"]
    # The failures are still in the 5-minute window; the reset started a fresh one.
    for _ in range(3):
        await ev.run_once()
        assert breaker(dsn)["state"] == "CLOSED"


async def test_a_fresh_window_still_trips_on_new_failures(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """window_from drops the old minute buckets, not the new ones: failures after the reset
    trip the breaker again."""
    rows(
        dsn,
        "INSERT INTO taskq.breakers (task_type, state, window_from)"
        " VALUES ('job.x', 'CLOSED', now() - interval '2 minutes') RETURNING 1",
    )
    rows(
        dsn,
        "INSERT INTO taskq.task_stats (bucket, queue, task_type, outcome, n) VALUES"
        " (date_trunc('minute', now() - interval '3 minutes'), 'default', 'job.x', 'success', 100),"
        " (date_trunc('minute', now()), 'default', 'job.x', 'failed', 25) RETURNING 1",
    )
    assert await evaluator(pool, breaker_threshold=1000).run_once() == Level.WARNING
    assert breaker(dsn)["reason"] == "100% of 25 attempts failed"


async def test_an_idle_half_open_breaker_does_not_hold_the_level(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    set_breaker(dsn, "job.x", "HALF_OPEN")
    clock = Clock()
    ev = evaluator(pool, clock)
    assert await ev.run_once() == Level.WARNING  # no claimer has looked yet
    # A claimer wins the probe and finds nothing to run (the backlog is gone): it gives the
    # probe back, and the breaker no longer holds the level, however long it stays so.
    assert await _probe(pool, "w1")
    await _give_back(pool, "w1")
    assert await ev.run_once() == Level.WARNING  # the calm starts
    clock.now += 60
    for _ in range(3):
        assert await ev.run_once() == Level.NORMAL
    assert breaker(dsn)["state"] == "HALF_OPEN"  # its next task is still a probe
    # Nobody looks again for a while: each look reads the queue's backlog of other types.
    assert not await _probe(pool, "w2")
    rows(
        dsn,
        "UPDATE taskq.breakers SET probed_empty_at = now() - interval '6 s' RETURNING 1",
    )
    # Then a claimer takes the probe, and until it ends the breaker counts again.
    assert await _probe(pool, "w2")
    assert await ev.run_once() == Level.WARNING


async def test_an_idle_half_open_breaker_counts_again_after_it_reopens(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    """An empty probe is forgotten once the breaker changes state: OPEN again, then HALF_OPEN
    after the next cool-down, it counts until a claimer finds it empty again."""
    set_breaker(dsn, "job.x", "HALF_OPEN")
    assert await _probe(pool, "w1")
    await _give_back(pool, "w1")
    await fail(dsn, 1)  # a probe (a retry that came due) failed: OPEN
    rows(dsn, "UPDATE taskq.breakers SET opened_at = now() - interval '1 hour' RETURNING 1")
    ev = evaluator(pool, breaker_cooldown_seconds=30)
    assert await ev.run_once() == Level.WARNING
    assert breaker(dsn)["state"] == "HALF_OPEN"
    # The empty probe was before the breaker changed: the new HALF_OPEN is probed at once.
    assert await _probe(pool, "w2")


async def _probe(pool: AsyncConnectionPool[Any], worker_id: str) -> bool:
    async with pool.connection() as conn:
        return await store.breaker_take_probe(
            conn, task_type="job.x", worker_id=worker_id, probe_timeout=300, empty_wait=5
        )


async def _give_back(pool: AsyncConnectionPool[Any], worker_id: str) -> None:
    async with pool.connection() as conn:
        await store.breaker_give_back_probe(conn, task_type="job.x", worker_id=worker_id)


async def test_threshold_zero_turns_breakers_off(dsn: str, pool: AsyncConnectionPool[Any]) -> None:
    await fail(dsn, 30, threshold=0)
    b = breaker(dsn)
    assert b["state"] == "CLOSED" and b["consecutive_failures"] == 30  # counted, not tripped
    assert await evaluator(pool, breaker_threshold=0).run_once() == Level.NORMAL  # nor by rate
    assert breaker(dsn)["state"] == "CLOSED"


# --- the protection level ------------------------------------------------------------------


async def test_the_level_rises_at_once_stops_non_essential_types_and_steps_down(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    clock = Clock()
    ev = evaluator(pool, clock, calm_seconds=60.0)
    for name in ("a", "b"):
        set_breaker(dsn, name, "OPEN")
    assert await ev.run_once() == Level.DEGRADED  # two failing types: L2 at once
    assert level(dsn) == 2
    async with pool.connection() as conn:
        state = ControlState.from_row(await store.control_state(conn))
    handlers = [
        TaskOptions(task_type="pay.capture", essential=True),
        TaskOptions(task_type="mail.newsletter"),
    ]
    policy = claim_policy(state, queue="default", handlers=handlers, free=8, slots=8)
    assert [h.task_type for h in policy.handlers] == ["pay.capture"]  # non-essential stopped
    assert policy.limit == 4  # concurrency halved

    set_breaker(dsn, "c", "OPEN")
    assert await ev.run_once() == Level.CIRCUIT_OPEN
    rows(dsn, "UPDATE taskq.breakers SET state = 'CLOSED' RETURNING 1")
    assert await ev.run_once() == Level.CIRCUIT_OPEN  # the calm starts
    clock.now += 59
    assert await ev.run_once() == Level.CIRCUIT_OPEN
    clock.now += 1
    assert await ev.run_once() == Level.DEGRADED  # one step per calm period, not to L0
    clock.now += 60
    assert await ev.run_once() == Level.WARNING
    set_breaker(dsn, "d", "OPEN")
    assert await ev.run_once() == Level.WARNING  # back at target: the calm is over
    clock.now += 600
    assert await ev.run_once() == Level.WARNING
    rows(dsn, "DELETE FROM taskq.breakers RETURNING 1")
    assert await ev.run_once() == Level.WARNING
    clock.now += 60
    assert await ev.run_once() == Level.NORMAL
    assert level(dsn) == 0


async def test_emergency_is_never_lowered_automatically(
    dsn: str, pool: AsyncConnectionPool[Any]
) -> None:
    clock = Clock()
    ev = evaluator(pool, clock)
    for name in ("a", "b", "c", "d"):
        set_breaker(dsn, name, "OPEN")
    assert await ev.run_once() == Level.EMERGENCY
    rows(dsn, "DELETE FROM taskq.breakers RETURNING 1")
    for _ in range(3):
        clock.now += 3600
        assert await ev.run_once() == Level.EMERGENCY
