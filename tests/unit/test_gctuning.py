"""``taskq worker`` tunes the garbage collector for its process (``taskq/worker/gctuning.py``):
a young threshold a drain does not trip every few dozen attempts, and the startup objects
frozen out of full collections; an application that sets its own threshold keeps it."""

from __future__ import annotations

import gc
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq.cli import main
from taskq.worker import eventloop, gctuning


@pytest.fixture
def gc_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def _serve_seen(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    """Run ``taskq worker`` up to the point it would serve; what the collector looked like then."""
    seen: dict[str, Any] = {}

    def fake_run(coro: Any, factory: Any) -> None:
        coro.close()
        seen["threshold"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(eventloop, "run", fake_run)
    with pytest.raises(SystemExit) as exit_:
        main(["worker", *argv, "--dsn", "postgresql://unused/db"])
    assert exit_.value.code == 0
    return seen


@pytest.mark.usefixtures("gc_restored")
def test_the_worker_serves_with_a_raised_threshold_and_frozen_startup_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    seen = _serve_seen(monkeypatch, ["--app", "tests.apps.basic:app"])
    assert seen["threshold"] == (gctuning.YOUNG_THRESHOLD, 10, 10)
    assert seen["frozen"] > 1000  # every module imported so far


@pytest.mark.usefixtures("gc_restored")
def test_an_application_that_sets_its_own_threshold_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "gc_tuned_app.py").write_text(
        textwrap.dedent(
            """
            import gc
            import taskq

            gc.set_threshold(123, 4, 5)
            app = taskq.App()


            @app.task("gc.noop")
            def noop(ctx, payload):
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gc_tuned_app", raising=False)
    gc.set_threshold(700, 10, 10)
    seen = _serve_seen(monkeypatch, ["--app", "gc_tuned_app:app"])
    assert seen["threshold"] == (123, 4, 5)


@pytest.mark.usefixtures("gc_restored")
def test_a_higher_threshold_already_set_is_not_lowered() -> None:
    gc.set_threshold(50_000, 10, 10)
    gctuning.before_app_import()
    assert gc.get_threshold()[0] == 50_000
