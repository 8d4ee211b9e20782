"""A worker imports the OpenTelemetry API when it is built, not in its first attempt: the
import took ~4 ms, all of the first task's extra dispatch latency (traced with cProfile from
the claim's reply to the handler's first line)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import taskq
from taskq.worker.worker import Worker

app = taskq.App(dsn="postgresql://nobody@127.0.0.1:1/none")

@app.task("t.x")
async def x(ctx, payload): ...

modules = ("opentelemetry.trace", "opentelemetry.context",
           "opentelemetry.trace.propagation.tracecontext")
before = any(m in sys.modules for m in modules)
Worker(app, dsn="postgresql://nobody@127.0.0.1:1/none")
print(before, all(m in sys.modules for m in modules))
"""


def test_building_a_worker_imports_opentelemetry_before_any_attempt() -> None:
    pytest.importorskip("opentelemetry.trace")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["False", "True"], out.stderr
