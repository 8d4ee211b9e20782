"""Dead code made real: the DSN resolved at the edge, UnknownTaskType raised, the level-change
counter counted."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import taskq
from taskq import logs
from taskq.cli import main
from taskq.control import protection
from taskq.control.state import Level
from taskq.db import embedded
from taskq.settings import ProtectionSettings


def test_an_app_never_starts_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> str:
        raise AssertionError("the embedded server was started")

    monkeypatch.setattr(embedded, "start_server", refuse)
    monkeypatch.delenv("TASKQ_DSN", raising=False)
    assert taskq.App().dsn is None
    monkeypatch.setenv("TASKQ_DSN", "postgresql://from-env/db")
    assert taskq.App().dsn == "postgresql://from-env/db"
    assert taskq.App(dsn="postgresql://given/db").dsn == "postgresql://given/db"


def test_enqueue_with_an_app_refuses_an_unregistered_type(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["enqueue", "no.such.type", "--app", "tests.apps.basic:app", "--dsn", "unused"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "taskq: error: tests.apps.basic:app registers no task type 'no.such.type'"
    )
    assert "test.record" in err and "\n" not in err


class _Pool:
    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[object]:
        yield object()


async def test_a_level_change_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    logs.configure("json", "error")  # to this test's stderr (a CLI test may have bound another)

    async def nothing(*_: Any, **__: Any) -> list[Any]:
        return []

    async def two_failing(*_: Any) -> list[dict[str, str]]:
        return [{"task_type": "a", "state": "OPEN"}, {"task_type": "b", "state": "OPEN"}]

    async def level0(*_: Any) -> dict[str, int]:
        return {"level": 0}

    async def accepted(*_: Any, **__: Any) -> bool:
        return True

    for name, fake in (
        ("breaker_half_open", nothing),
        ("breaker_trip_by_rate", nothing),
        ("failing_types", two_failing),
        ("control_state", level0),
        ("aprotection_set", accepted),
    ):
        monkeypatch.setattr(protection.store, name, fake)
    changes: list[tuple[Level, Level]] = []
    evaluator = protection.ProtectionEvaluator(
        _Pool(),  # type: ignore[arg-type]
        ProtectionSettings(),
        worker_id="w",
        on_change=lambda before, after: changes.append((before, after)),
    )
    assert await evaluator.run_once() == Level.WARNING
    assert changes == [(Level.NORMAL, Level.WARNING)]


def test_a_half_written_postmaster_pid_is_no_crash(tmp_path: Any) -> None:
    """`taskq server status` read postmaster.pid while the postmaster rewrote it (seven lines,
    no status line yet) and died with a traceback; a half-written file is now read again, and
    taken as a server not ready when it stays so."""
    pid_file = tmp_path / "postmaster.pid"
    pid_file.write_text("8347\n/data\n1796167101\n5432\n\n\n  2319055    163862\n")
    assert embedded.postmaster_info(tmp_path, attempts=2) is None
    pid_file.write_text(
        "8347\n/data\n1796167101\n5432\n/tmp\nlocalhost\n  2319055    163862\nready\n"
    )
    info = embedded.postmaster_info(tmp_path, attempts=2)
    assert info is not None and info.port == 5432
    assert embedded.postmaster_info(tmp_path / "missing") is None
