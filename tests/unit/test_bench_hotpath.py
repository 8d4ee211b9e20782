"""``bench/hotpath.py`` drives the worker's own claimer, executor and completer: it must keep
working as they change (every attempt reported and batched), and leave the store as it was."""

from __future__ import annotations

from bench import hotpath
from taskq.db import store


async def test_the_hot_path_harness_runs_every_attempt_through_the_completer() -> None:
    real = store.mark_success_many
    per_attempt = await hotpath.drain(3)  # raises unless all 300 outcomes were written
    assert 0 < per_attempt < 0.01
    assert store.mark_success_many is real
