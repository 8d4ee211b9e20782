"""The worker's event loop choice (``taskq worker --event-loop``)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from taskq.errors import ConfigError
from taskq.worker import eventloop


def test_auto_and_uvloop_run_on_uvloop_when_it_is_installed() -> None:
    for choice in ("auto", "uvloop"):
        factory = eventloop.loop_factory(choice)  # type: ignore[arg-type]
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop)
            assert eventloop.loop_name(loop) == "uvloop"
        finally:
            loop.close()


def test_asyncio_is_asyncio_s_own_loop() -> None:
    assert eventloop.loop_factory("asyncio") is None
    with asyncio.Runner(loop_factory=eventloop.loop_factory("asyncio")) as runner:
        assert runner.run(_running_loop_name()) == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert eventloop.loop_factory("auto") is None
    missing = r"uvloop is not installed \(pip install 'taskq\[speed\]'\)"
    with pytest.raises(ConfigError, match=missing):
        eventloop.loop_factory("uvloop")


async def _running_loop_name() -> str:
    return eventloop.loop_name(asyncio.get_running_loop())
