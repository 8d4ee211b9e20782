"""OpenTelemetry: the trace context goes from the enqueue to the attempt's span, and on to
child tasks; the task's trace_id is the OTel trace id. Checked with the SDK's in-memory
exporter (the SDK is a test dependency; taskq itself uses only the API)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import taskq
from tests.support import all_in, rows, wait_until

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The process's SDK provider (set once: OpenTelemetry's global cannot be replaced)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    return _EXPORTER


def attempts(exporter: InMemorySpanExporter, task_type: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"taskq.attempt {task_type}"]


async def test_enqueue_in_a_span_gives_an_attempt_span_in_the_same_trace(
    dsn: str, worker_factory: Any, spans: InMemorySpanExporter
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("otel.parent")
    async def parent(ctx: taskq.TaskContext, payload: Any) -> None:
        await ctx.aenqueue("otel.child")

    @app.task("otel.child")
    def child(ctx: taskq.TaskContext, payload: Any) -> None:
        pass

    tracer = trace.get_tracer("a-web-request")
    with tracer.start_as_current_span("POST /orders") as request:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            task_id = await app.enqueue(conn, "otel.parent")
    request_context = request.get_span_context()
    hex_trace = f"{request_context.trace_id:032x}"
    [row] = rows(dsn, "SELECT trace_id, traceparent FROM taskq.tasks WHERE id = %s", (task_id,))
    assert row["trace_id"] == hex_trace
    assert row["traceparent"] == (
        f"00-{hex_trace}-{request_context.span_id:016x}-{int(request_context.trace_flags):02x}"
    )

    await worker_factory(app)
    await wait_until(all_in(dsn, {"SUCCESS"}), what="parent and child to succeed")
    await wait_until(lambda: len(attempts(spans, "otel.child")) == 1, what="the child span")

    [attempt] = attempts(spans, "otel.parent")
    assert attempt.context.trace_id == request_context.trace_id
    assert attempt.parent is not None and attempt.parent.span_id == request_context.span_id
    assert attempt.kind == trace.SpanKind.CONSUMER
    assert dict(attempt.attributes or {}) == {
        "taskq.task_id": task_id,
        "taskq.task_type": "otel.parent",
        "taskq.queue": "default",
        "taskq.attempt": 0,
        "taskq.worker_id": dict(attempt.attributes or {})["taskq.worker_id"],
        "messaging.system": "taskq",
        "taskq.outcome": "success",
    }
    # The child continues the trace: its attempt's parent is the parent's attempt.
    [child_attempt] = attempts(spans, "otel.child")
    assert child_attempt.context.trace_id == request_context.trace_id
    assert child_attempt.parent is not None
    assert child_attempt.parent.span_id == attempt.context.span_id
    [child_row] = rows(dsn, "SELECT trace_id FROM taskq.tasks WHERE task_type = 'otel.child'")
    assert child_row["trace_id"] == hex_trace


async def test_enqueue_many_in_a_span_puts_every_task_in_its_trace(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    """Every item of one call joins the caller's span's trace; a trace id an item names
    itself still wins."""
    app = taskq.App(dsn=dsn)
    tracer = trace.get_tracer("a-batch-job")
    with tracer.start_as_current_span("nightly import") as job:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            ids = await app.enqueue_many(
                conn,
                [taskq.EnqueueItem("otel.bulk", {"i": i}) for i in range(3)]
                + [taskq.EnqueueItem("otel.bulk", {"i": 3}, trace_id="mine")],
            )
    context = job.get_span_context()
    hex_trace = f"{context.trace_id:032x}"
    found = rows(
        dsn,
        "SELECT trace_id, traceparent FROM taskq.tasks WHERE id = ANY(%s) ORDER BY id",
        ([int(i) for i in ids],),
    )
    assert [r["trace_id"] for r in found] == [hex_trace] * 3 + ["mine"]
    assert {r["traceparent"] for r in found} == {
        f"00-{hex_trace}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    }


async def test_without_a_span_the_attempt_joins_the_tasks_trace_id(
    dsn: str, worker_factory: Any, spans: InMemorySpanExporter
) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("otel.fails", max_retry_count=0)
    def fails(ctx: taskq.TaskContext, payload: Any) -> None:
        raise ValueError("no")

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        task_id = await app.enqueue(conn, "otel.fails")
    [row] = rows(dsn, "SELECT trace_id, traceparent FROM taskq.tasks WHERE id = %s", (task_id,))
    assert row["traceparent"] is None
    await worker_factory(app)
    await wait_until(lambda: len(attempts(spans, "otel.fails")) == 1, what="the attempt span")
    [attempt] = attempts(spans, "otel.fails")
    assert f"{attempt.context.trace_id:032x}" == row["trace_id"]
    assert (attempt.attributes or {})["taskq.outcome"] == "failure"
    assert (attempt.attributes or {})["error.type"] == "ValueError"
    assert attempt.status.status_code == trace.StatusCode.ERROR
