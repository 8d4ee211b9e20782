"""The worker's hot-path shortcuts keep the semantics of what they replace: one shared timer
for attempt timeouts (``asyncio.timeout``), per-batch metric updates (one ``inc``/``observe``
per task), no span when no OpenTelemetry SDK is configured, log keys built only when an event
is logged."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram

from taskq import logs, tracing
from taskq.model import ClaimedTask
from taskq.outcome import Outcome
from taskq.worker.executor import Deadlines
from taskq.worker.metrics import Metrics, observe_many

# --- one timer for every attempt's timeout ---------------------------------------------------


async def test_a_deadline_that_falls_due_cancels_the_block_with_timeout_error() -> None:
    deadlines = Deadlines()
    scope = deadlines.scope(0.02)
    with pytest.raises(TimeoutError), scope:
        await asyncio.sleep(5)
    assert scope.expired()
    assert len(deadlines) == 0


async def test_a_block_that_ends_in_time_is_not_touched_by_the_timer() -> None:
    deadlines = Deadlines()
    scope = deadlines.scope(0.02)
    with scope:
        await asyncio.sleep(0)
    assert len(deadlines) == 0
    await asyncio.sleep(0.05)  # the timer fires, finds nothing due
    assert not scope.expired()


async def test_deadlines_of_different_lengths_each_expire_on_their_own() -> None:
    deadlines = Deadlines()
    ended: dict[str, str] = {}

    async def attempt(name: str, limit: float, work: float) -> None:
        try:
            with deadlines.scope(limit):
                await asyncio.sleep(work)
            ended[name] = "done"
        except TimeoutError:
            ended[name] = "timed out"

    await asyncio.gather(
        attempt("long, slow", 0.3, 5),
        attempt("short, slow", 0.02, 5),
        attempt("long, quick", 5, 0.05),
        attempt("short, quick", 0.2, 0.01),
    )
    assert ended == {
        "long, slow": "timed out",
        "short, slow": "timed out",
        "long, quick": "done",
        "short, quick": "done",
    }
    assert len(deadlines) == 0


async def test_expire_soon_ends_the_block_at_once_like_reschedule_zero() -> None:
    deadlines = Deadlines()
    scope = deadlines.scope(60)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError), scope:
        scope.expire_soon()
        scope.expire_soon()  # twice: still one cancellation
        await asyncio.sleep(5)
    assert loop.time() - started < 1
    assert scope.expired()


async def test_a_cancellation_from_outside_is_not_swallowed_as_a_timeout() -> None:
    deadlines = Deadlines()
    inside = asyncio.Event()

    async def attempt() -> None:
        with deadlines.scope(60) as scope:
            inside.set()
            scope.expire_soon()
            asyncio.current_task().cancel()  # type: ignore[union-attr]  # a shutdown, too
            await asyncio.sleep(5)

    task = asyncio.create_task(attempt())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inside.is_set()


async def test_without_a_timeout_nothing_is_timed() -> None:
    deadlines = Deadlines()
    with deadlines.scope(None):
        assert len(deadlines) == 0
        await asyncio.sleep(0.01)


# --- metrics per batch -----------------------------------------------------------------------


def test_observe_many_gives_the_samples_one_observe_per_value_gives() -> None:
    registry = CollectorRegistry()
    buckets = (0.001, 0.01, 0.1, 1.0, 10.0)
    one = Histogram("one_by_one", "", buckets=buckets, registry=registry)
    many = Histogram("in_batches", "", buckets=buckets, registry=registry)
    values = [0.0, 0.001, 0.0011, 0.05, 0.1, 0.5, 1.0, 3.0, 10.0, 11.0, 1e9, float("nan")]
    for value in values:
        one.observe(value)
    observe_many(many, values[:1])
    observe_many(many, values[1:])

    def samples(name: str) -> list[tuple[str, object, float]]:
        out = []
        for metric in registry.collect():
            if metric.name == name:
                for s in metric.samples:
                    if not s.name.endswith("_created"):
                        le = s.labels.get("le")
                        out.append((s.name.removeprefix(name), le, s.value))
        return out

    got, want = samples("in_batches"), samples("one_by_one")
    # The sums hold a NaN each: compare them as text.
    assert [(n, le, repr(v)) for n, le, v in got] == [(n, le, repr(v)) for n, le, v in want]


def _task(task_id: int, task_type: str, retry_count: int, waited: float | None) -> ClaimedTask:
    now = dt.datetime.now(dt.UTC)
    return ClaimedTask(
        id=task_id,
        task_type=task_type,
        queue="default",
        biz_id=None,
        payload={},
        priority=0,
        retry_count=retry_count,
        max_retry_count=5,
        timeout_seconds=60,
        effective_id=uuid.uuid4(),
        trace_id=None,
        created_at=now,
        scheduled_at=now,
        started_at=now,
        ready_at=None if waited is None else now - dt.timedelta(seconds=waited),
    )


def test_claimed_many_and_outcomes_count_what_per_task_calls_count() -> None:
    tasks = [
        _task(1, "a", 0, 0.002),
        _task(2, "a", 0, 0.5),
        _task(3, "a", 1, None),
        _task(4, "b", 7, 3.0),
    ]
    per_task, batched = Metrics(), Metrics()
    for t in tasks:
        waited = (t.started_at - t.ready_at).total_seconds() if t.ready_at else None
        per_task.claimed(t.queue, t.task_type, t.retry_count, waited)
    batched.claimed_many(tasks)
    outcomes = [Outcome.success(t, 0.01 * t.id) for t in tasks]
    for o in outcomes:
        per_task.outcome(o)
        per_task.outcome(o, "dead_lettered")
    batched.outcomes(outcomes)
    batched.outcomes(outcomes, "dead_lettered")

    def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): round(s.value, 9)
            for metric in m.registry.collect()
            for s in metric.samples
            if not s.name.endswith("_created")
        }

    assert samples(batched) == samples(per_task)


# --- tracing off -----------------------------------------------------------------------------


def _sdk_configured() -> bool:
    trace = tracing._otel()
    return trace is not None and not tracing._no_sdk(trace)


@pytest.mark.skipif(tracing._otel() is None, reason="opentelemetry-api not installed")
def test_without_an_sdk_a_stored_traceparent_is_still_current_for_the_handler() -> None:
    if _sdk_configured():
        # The otel integration test set its SDK provider in this process (a global that cannot
        # be unset): check in a fresh interpreter instead of skipping.
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import {__name__} as t; t.{_traceparent_without_sdk.__name__}()",
            ],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return
    _traceparent_without_sdk()


def _traceparent_without_sdk() -> None:
    assert not _sdk_configured()
    trace = tracing._otel()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    span = tracing.attempt_span(_with_traceparent(parent), "w")
    assert span is not None
    with span:
        found, trace_id = tracing.current()
    assert found == parent
    assert trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert tracing.attempt_span(_with_traceparent(None), "w") is None  # nothing to enter
    assert not trace.get_current_span().get_span_context().is_valid


def _with_traceparent(traceparent: str | None) -> ClaimedTask:
    t = _task(1, "a", 0, None)
    t.traceparent = traceparent
    return t


# --- log keys of the running attempt ---------------------------------------------------------


def test_an_event_logged_inside_an_attempt_gets_its_keys_and_keeps_its_own() -> None:
    task = _task(7, "a.b", 2, None)
    task.biz_id, task.trace_id, task.payload = "order-1", "f" * 32, {"secret": 1}
    token = logs.TASK_FIELDS.set((task, "w-1", False))
    try:
        event = logs.merge_task_fields(None, "info", {"event": "x", "attempt": "mine"})
    finally:
        logs.TASK_FIELDS.reset(token)
    assert event == {
        "event": "x",
        "task_id": 7,
        "task_type": "a.b",
        "biz_id": "order-1",
        "trace_id": "f" * 32,
        "attempt": "mine",  # the event's own value wins
        "worker_id": "w-1",
    }
    token = logs.TASK_FIELDS.set((task, "w-1", True))  # --log-payloads
    try:
        assert logs.merge_task_fields(None, "info", {})["payload"] == {"secret": 1}
    finally:
        logs.TASK_FIELDS.reset(token)
    assert logs.merge_task_fields(None, "info", {"event": "y"}) == {"event": "y"}  # outside
