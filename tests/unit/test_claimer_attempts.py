"""The claimer runs each attempt in an asyncio task of its own (no TaskGroup) and does what a
group did: when stopped it waits for the attempts out; when cancelled it cancels them and
waits until each has ended. Fake executor, no database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from taskq.model import Claimed, TaskOptions
from taskq.outcome import Outcome
from taskq.worker.claimer import Claimer
from taskq.worker.metrics import Metrics
from tests.unit.test_completer import task


class BlockingExecutor:
    """Each attempt waits for ``release``; records how each one ended."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[int] = []
        self.all_started = asyncio.Event()
        self.expected = 0
        self.cancelled: list[int] = []

    def is_async(self, task_type: str) -> bool:
        return True

    async def run(self, claimed: Any, report: Callable[[Outcome], None]) -> None:
        self.started.append(claimed.id)
        if len(self.started) == self.expected:
            self.all_started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(claimed.id)
            raise
        report(Outcome.success(claimed, 0.0))


class NoControl:
    state = None


def claimer_with(executor: BlockingExecutor, reported: list[Outcome]) -> Claimer:
    return Claimer(
        queue="default",
        slots=10,
        handlers=[TaskOptions(task_type="job.x")],
        pool=None,  # type: ignore[arg-type]  # never claims: attempts are started by hand
        executor=executor,  # type: ignore[arg-type]
        report=reported.append,
        worker_id="w",
        poll_interval_seconds=1.0,
        control=NoControl(),  # type: ignore[arg-type]
        metrics=Metrics(),
    )


def start(claimer: Claimer, executor: BlockingExecutor, ids: list[int]) -> None:
    executor.expected = len(ids)
    claimer._start(Claimed(task(i) for i in ids))


async def stopped_with_three_running() -> tuple[
    BlockingExecutor, list[Outcome], Claimer, asyncio.Task[None]
]:
    """A claimer with attempts 1-2-3 running, told to stop, its ``run`` under way."""
    executor, reported = BlockingExecutor(), []
    claimer = claimer_with(executor, reported)
    start(claimer, executor, [1, 2, 3])
    claimer.stop()
    runner = asyncio.create_task(claimer.run())
    await executor.all_started.wait()
    return executor, reported, claimer, runner


async def test_a_stopped_claimer_returns_once_its_attempts_have_ended() -> None:
    executor, reported, claimer, runner = await stopped_with_three_running()
    await asyncio.sleep(0)  # one more pass: a runner that did not wait would be done now
    assert not runner.done() and claimer.in_flight == 3
    executor.release.set()
    await runner
    assert sorted(o.task.id for o in reported) == [1, 2, 3]
    assert claimer.in_flight == 0 and claimer.idle.is_set() and not claimer._tasks


async def test_a_cancelled_claimer_cancels_its_attempts_and_waits_for_them() -> None:
    executor, reported, claimer, runner = await stopped_with_three_running()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert sorted(executor.cancelled) == [1, 2, 3] and not reported
    assert claimer.in_flight == 0 and claimer.idle.is_set() and not claimer._tasks


async def test_attempts_cancelled_before_their_first_step_free_their_slots() -> None:
    """A task cancelled before it ran never enters ``_run_one``, whose cleanup frees the
    slot: the claimer forgets it when it finds it ended."""
    executor, reported = BlockingExecutor(), []
    claimer = claimer_with(executor, reported)
    start(claimer, executor, [1, 2])
    claimer.interrupt(force=True)  # before the loop ran either
    claimer.stop()
    await asyncio.wait_for(claimer.run(), timeout=5)
    assert executor.started == [] and not reported
    assert claimer.in_flight == 0 and claimer.idle.is_set() and not claimer._tasks
