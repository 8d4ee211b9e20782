"""The completer's batching, with a fake pool and store: no database."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import socket
import types
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from taskq import logs
from taskq.db import store
from taskq.model import ClaimedTask, Finished, Status, TaskOptions
from taskq.outcome import Outcome
from taskq.worker import completer as completer_module
from taskq.worker.completer import Completer
from taskq.worker.inflight import ClaimsInFlight
from taskq.worker.metrics import Metrics

_IDLE = socket.socketpair()  # a socket nothing is ever sent to, for this module's tests


@pytest.fixture(scope="module", autouse=True)
def _close_the_idle_socket() -> Iterator[None]:
    yield
    for end in _IDLE:
        end.close()


class FakeConn:
    """Passes the check at checkout: open, and nothing waiting on its (idle) socket."""

    def __init__(self) -> None:
        self.closed = False
        self.pgconn = types.SimpleNamespace(
            status=psycopg.pq.ConnStatus.OK, socket=_IDLE[0].fileno()
        )
        self.info = types.SimpleNamespace(transaction_status=psycopg.pq.TransactionStatus.IDLE)
        self.executed: list[Any] = []  # the session settings (the store's calls are faked)

    async def execute(self, statement: Any) -> None:
        self.executed.append(statement)

    def close(self) -> None:
        self.closed = True


class FakePool:
    def __init__(self) -> None:
        self.handed_out: list[FakeConn] = []
        self.given_back: list[FakeConn] = []

    async def getconn(self) -> FakeConn:
        conn = FakeConn()
        self.handed_out.append(conn)
        return conn

    async def putconn(self, conn: FakeConn) -> None:
        self.given_back.append(conn)


def task(task_id: int, task_type: str = "job.x", max_retry_count: int = 5) -> ClaimedTask:
    now = dt.datetime.now(dt.UTC)
    return ClaimedTask(
        id=task_id,
        task_type=task_type,
        queue="default",
        biz_id=None,
        payload={},
        priority=0,
        retry_count=0,
        max_retry_count=max_retry_count,
        timeout_seconds=30,
        effective_id=uuid.uuid4(),
        trace_id=None,
        created_at=now,
        scheduled_at=now,
        started_at=now,
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict[str, Any]]]:
    """Every store call the completer makes, with its arguments."""
    seen: dict[str, list[dict[str, Any]]] = {}

    async def mark_success_many(conn: Any, ids: Any, tokens: Any, **kw: Any) -> set[int]:
        seen.setdefault("mark_success_many", []).append({"ids": list(ids)})
        return set(ids)

    async def mark_failed_many(conn: Any, **kw: Any) -> dict[int, Finished]:
        seen.setdefault("mark_failed_many", []).append(kw)
        # Even ids were on their last retry: dead-lettered by exhaustion.
        return {
            i: Finished(Status.DEAD_LETTER if i % 2 == 0 else Status.FAILED, 1, None)
            for i in kw["ids"]
        }

    async def mark_dead_many(conn: Any, **kw: Any) -> dict[int, Finished]:
        seen.setdefault("mark_dead_many", []).append(kw)
        return {i: Finished(Status.DEAD_LETTER, 0, None) for i in kw["ids"]}

    async def release_many(conn: Any, ids: Any, tokens: Any) -> list[int]:
        seen.setdefault("release_many", []).append({"ids": list(ids)})
        return list(ids)

    for name, fn in [
        ("mark_success_many", mark_success_many),
        ("mark_failed_many", mark_failed_many),
        ("mark_dead_many", mark_dead_many),
        ("release_many", release_many),
    ]:
        monkeypatch.setattr(store, name, fn)
    return seen


def new_completer(
    metrics: Metrics | None = None,
    capacity: int = 1000,
    claims_in_flight: ClaimsInFlight | None = None,
    pool: FakePool | None = None,
) -> Completer:
    return Completer(
        pool or FakePool(),  # type: ignore[arg-type]
        lambda t: TaskOptions(t),
        worker_id="w",
        metrics=metrics,
        capacity=capacity,
        claims_in_flight=claims_in_flight,
    )


async def test_one_statement_per_kind_per_flush(calls: dict[str, list[dict[str, Any]]]) -> None:
    completer = new_completer()
    boom = RuntimeError("boom")
    for n in range(1, 41):
        completer.put(Outcome.failure(task(n), 0.1, boom))
    for n in range(41, 51):
        completer.put(Outcome.retry(task(n), 0.1, boom, 5.0))
    for n in range(51, 61):
        completer.put(Outcome.dead(task(n), 0.1, boom))
    for n in range(61, 71):
        completer.put(Outcome.success(task(n), 0.1))
    for n in range(71, 76):
        completer.put(Outcome.released(task(n), 0.1, "Interrupted: shutdown"))
    await completer.run_once()
    assert {name: len(c) for name, c in calls.items()} == {
        "mark_success_many": 1,
        "mark_failed_many": 1,
        "mark_dead_many": 1,
        "release_many": 1,
    }
    [failed] = calls["mark_failed_many"]
    assert len(failed["ids"]) == 50
    # An exception counts against the breaker; a taskq.Retry (a snooze) does not.
    assert failed["counts_for_breaker"] == [True] * 40 + [False] * 10
    assert failed["after_seconds"] == [None] * 40 + [5.0] * 10
    assert completer.pending == 0


async def test_a_retry_exhausted_failure_counts_as_dead_lettered(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    metrics = Metrics()
    completer = new_completer(metrics)
    completer.put(Outcome.failure(task(2), 0.1, RuntimeError("x")))  # exhausted (even)
    completer.put(Outcome.failure(task(3), 0.1, RuntimeError("x")))  # retried later (odd)
    await completer.run_once()

    def count(outcome: str) -> float:
        labels = {"queue": "default", "task_type": "job.x", "outcome": outcome}
        return metrics.registry.get_sample_value("taskq_tasks_finished_total", labels) or 0.0

    assert count("dead_lettered") == 1 and count("failure") == 1


async def test_the_queue_is_bounded_for_claimers(calls: dict[str, list[dict[str, Any]]]) -> None:
    completer = new_completer(capacity=3)
    assert completer.room.is_set()
    for n in range(3):
        completer.put(Outcome.success(task(n), 0.1))
    assert not completer.room.is_set() and completer.pending == 3
    completer.put(Outcome.success(task(9), 0.1))  # reports are never refused
    await completer.run_once()
    assert completer.room.is_set() and completer.pending == 0


async def test_the_claim_woken_with_the_outcomes_goes_out_before_their_write(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    """Attempts that finish report their outcomes and free their slots in the same pass of the
    event loop, so the completer and the claimer wake together. The claimer runs first: the
    next attempts wait for its claim's round trip, nobody waits for this write's. What it
    reports meanwhile joins the same batch."""
    completer = new_completer()
    writes_before_the_claim: list[int] = []
    writing = asyncio.ensure_future(completer.run_once())
    await asyncio.sleep(0)  # the completer now waits for its first outcome

    def claimer_round() -> None:
        writes_before_the_claim.append(len(calls.get("mark_success_many", [])))
        completer.put(Outcome.success(task(2), 0.1))

    completer.put(Outcome.success(task(1), 0.1))  # wakes the completer first
    asyncio.get_running_loop().call_soon(claimer_round)  # woken by the same finish, behind it
    assert await writing == 2
    assert writes_before_the_claim == [0]
    assert calls["mark_success_many"] == [{"ids": [1, 2]}]


async def test_a_batch_cancelled_while_it_steps_aside_leaves_its_outcome_queued(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    """A cancellation before the batch is taken (the step aside for the claimer) loses
    nothing: the outcome stays queued, and the next call writes it."""
    completer = new_completer()
    completer.put(Outcome.success(task(1), 0.1))
    writing = asyncio.ensure_future(completer.run_once())
    await asyncio.sleep(0)  # it saw the outcome and steps aside for the claimer
    assert completer.pending == 1
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert completer.pending == 1 and "mark_success_many" not in calls
    assert await completer.run_once() == 1
    await asyncio.wait_for(completer.drain(), timeout=1)
    assert completer.pending == 0 and calls["mark_success_many"] == [{"ids": [1]}]


async def test_the_batch_waits_for_the_claim_in_flight_and_goes_before_its_attempts(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    """Sent while the claim runs in the server, the completion costs the database more per task
    than sent once the claim is answered (inflight.py). Once it is, the batch goes out before
    the attempts the claim returned start: they would otherwise report first and the claimer,
    woken by their slots, send its next claim beside this write again."""
    claims = ClaimsInFlight()
    completer = new_completer(claims_in_flight=claims)
    answer = asyncio.Event()
    order: list[str] = []

    async def claim_round() -> None:
        with claims.claiming():
            await answer.wait()
        # The claimer starts the claimed attempts right after the claim is answered.
        asyncio.get_running_loop().call_soon(order.append, "attempts started")

    claiming = asyncio.ensure_future(claim_round())
    await asyncio.sleep(0)  # the claim is out
    completer.put(Outcome.success(task(1), 0.1))
    writing = asyncio.ensure_future(completer.run_once())
    for _ in range(5):
        await asyncio.sleep(0)
    assert "mark_success_many" not in calls  # held while the claim is out
    completer.put(Outcome.success(task(2), 0.1))  # reported meanwhile: joins the batch

    async def mark_success_many(conn: Any, ids: Any, tokens: Any, **kw: Any) -> set[int]:
        order.append("batch sent")
        calls.setdefault("mark_success_many", []).append({"ids": list(ids)})
        return set(ids)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "mark_success_many", mark_success_many)
        answer.set()
        assert await writing == 2
    await claiming
    await asyncio.sleep(0)
    assert order == ["batch sent", "attempts started"]
    assert calls["mark_success_many"] == [{"ids": [1, 2]}]


async def test_claims_in_flight_waits_only_for_the_claims_out_when_asked() -> None:
    claims = ClaimsInFlight()
    await asyncio.wait_for(claims.settled(60), timeout=1)  # none out: at once
    first, later = asyncio.Event(), asyncio.Event()

    async def claim(answer: asyncio.Event) -> None:
        with claims.claiming():
            await answer.wait()

    out = [asyncio.ensure_future(claim(first))]
    await asyncio.sleep(0)
    settling = asyncio.ensure_future(claims.settled(60))
    await asyncio.sleep(0)
    out.append(asyncio.ensure_future(claim(later)))  # sent after the call: not waited for
    await asyncio.sleep(0)
    assert len(claims) == 2 and not settling.done()
    first.set()
    await asyncio.wait_for(settling, timeout=1)
    assert len(claims) == 1
    # A claim that never answers holds a batch back for at most ``at_most`` seconds.
    await asyncio.wait_for(claims.settled(0.01), timeout=1)
    later.set()
    await asyncio.gather(*out)
    assert len(claims) == 0


async def test_a_failed_claim_counts_as_answered() -> None:
    claims = ClaimsInFlight()
    with contextlib.suppress(OSError), claims.claiming():
        raise OSError("connection lost")
    assert len(claims) == 0
    await asyncio.wait_for(claims.settled(60), timeout=1)


@pytest.fixture
def written_on(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connection each success batch was written on; the first write fails as a dropped
    connection would when ``fail_first`` is in the list."""
    seen: list[Any] = []

    async def mark_success_many(conn: Any, ids: Any, tokens: Any, **kw: Any) -> set[int]:
        if seen and seen[0] == "fail_first":
            seen.pop(0)
            seen.append(conn)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        seen.append(conn)
        return set(ids)

    monkeypatch.setattr(store, "mark_success_many", mark_success_many)
    return seen


async def test_batches_are_written_on_one_kept_connection(written_on: list[Any]) -> None:
    """The pool hands its connections out in turn; taken per batch, the completions went to
    every backend of the pool, each planning them again."""
    pool = FakePool()
    completer = new_completer(pool=pool)
    for n in range(1, 4):
        completer.put(Outcome.success(task(n), 0.1))
        await completer.run_once()
    assert len(pool.handed_out) == 1
    assert written_on == pool.handed_out * 3
    assert pool.given_back == []


async def test_a_kept_connection_the_server_closed_is_replaced(written_on: list[Any]) -> None:
    pool = FakePool()
    completer = new_completer(pool=pool)
    completer.put(Outcome.success(task(1), 0.1))
    await completer.run_once()
    first = pool.handed_out[0]
    first.close()  # a restart or a terminated backend, while it sat idle
    completer.put(Outcome.success(task(2), 0.1))
    await completer.run_once()
    assert pool.given_back == [first]  # the pool discards or replaces it
    assert written_on == [first, pool.handed_out[1]]


async def test_a_failed_write_gives_its_connection_back(written_on: list[Any]) -> None:
    pool = FakePool()
    completer = new_completer(pool=pool)
    written_on.append("fail_first")
    completer.put(Outcome.success(task(1), 0.1))
    await completer.run_once()  # fails, backs off, writes again
    first, second = pool.handed_out
    assert pool.given_back == [first]
    assert written_on == [first, second]
    assert completer.pending == 0


async def test_a_stopped_completer_gives_its_connection_back(written_on: list[Any]) -> None:
    pool = FakePool()
    completer = new_completer(pool=pool)
    completer.put(Outcome.success(task(1), 0.1))
    running = asyncio.create_task(completer.run())
    await completer.drain()
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert pool.given_back == pool.handed_out and len(pool.handed_out) == 1


async def test_the_stray_check_sees_outcomes_queued_being_written_and_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heartbeat hands back rows this worker holds but does not run, unless their outcome
    is queued, in the batch being written, or written lately (its report was stale)."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_success(conn: Any, ids: Any, tokens: Any, **kw: Any) -> set[int]:
        entered.set()
        await release.wait()
        return set(ids)

    monkeypatch.setattr(store, "mark_success_many", slow_success)
    completer = new_completer()
    first, second = task(1), task(2)
    completer.put(Outcome.success(first, 0.1))
    assert completer.unwritten() == {1} and not completer.written(first.effective_id)
    writing = asyncio.ensure_future(completer.run_once())
    await entered.wait()
    completer.put(Outcome.success(second, 0.1))
    assert completer.unwritten() == {1, 2}  # one being written, one queued
    release.set()
    assert await writing == 1
    assert completer.unwritten() == {2}
    assert completer.written(first.effective_id) and not completer.written(second.effective_id)
    assert not completer.written(uuid.uuid4())  # another attempt of a row is not this one


class RecordingLog:
    """Stands in for the completer's logger: the events it was asked to log, by level."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append(("info", event, fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append(("warning", event, fields))


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
async def test_failures_are_logged_at_their_levels_and_only_when_enabled(
    calls: dict[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch, level: int
) -> None:
    recorded = RecordingLog()
    monkeypatch.setattr(completer_module, "log", recorded)
    monkeypatch.setattr(logs, "_enabled_from", level)
    completer = new_completer()
    completer.put(Outcome.failure(task(2), 0.1, RuntimeError("gone\nmore")))  # exhausted (even)
    completer.put(Outcome.failure(task(3), 0.1, RuntimeError("gone\nmore")))  # retried (odd)
    await completer.run_once()
    by_event = {event: (lvl, fields) for lvl, event, fields in recorded.events}
    # A dead letter is a warning whatever the level; a retried failure is info, and at the
    # warning level it is not even built.
    assert by_event["task_dead_lettered"][0] == "warning"
    assert by_event["task_dead_lettered"][1]["task_id"] == 2
    if level == logging.INFO:
        lvl, fields = by_event["task_failed"]
        assert lvl == "info" and fields["task_id"] == 3 and fields["retry_count"] == 1
        assert fields["error"] == "RuntimeError: gone"
    else:
        assert "task_failed" not in by_event
