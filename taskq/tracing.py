"""OpenTelemetry, when it is there (``taskq[otel]``): the trace context goes from the enqueue to
the attempt's span.

- At enqueue, a current, valid span's W3C ``traceparent`` is stored on the row, and the task's
  ``trace_id`` is the span's trace id (so logs and traces agree).
- The worker runs each attempt in a span (``taskq.attempt <task_type>``, kind CONSUMER) whose
  parent is that traceparent; a task enqueued without one gets a span in the trace named by its
  own ``trace_id``. Child tasks enqueued by the handler are enqueued inside that span, so the
  trace continues through them.

Only ``opentelemetry-api`` is used. Without it installed this module costs one failed import,
once; with the API but no SDK configured, spans are the API's no-op ones.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from taskq.model import ClaimedTask
from taskq.outcome import Outcome

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


@functools.cache
def _otel() -> Any:
    """The opentelemetry.trace module, or None when the API is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def load() -> bool:
    """Import the OpenTelemetry API now, when it is installed: a worker calls this when it is
    built, so its first attempt does not pay the import (~4 ms here, the whole of the first
    task's extra dispatch latency). True when the API is there."""
    trace = _otel()
    if trace is None:
        return False
    # What an attempt with a parent uses: the context it attaches, the traceparent reader.
    for module in ("opentelemetry.context", "opentelemetry.trace.propagation.tracecontext"):
        importlib.import_module(module)
    return True


def current() -> tuple[str | None, str | None]:
    """(traceparent, trace id as 32 hex digits) of the current span, or (None, None)."""
    trace = _otel()
    if trace is None:
        return None, None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None, None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent"), f"{span_context.trace_id:032x}"


def _parent(task: ClaimedTask) -> Any:
    """The attempt span's parent context: the stored traceparent, else a remote parent in the
    trace the task's own trace_id names (when it is a valid trace id), else none (a new trace)."""
    trace = _otel()
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    if task.traceparent:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        return TraceContextTextMapPropagator().extract({"traceparent": task.traceparent})
    if task.trace_id and _HEX32.match(task.trace_id) and int(task.trace_id, 16):
        remote = SpanContext(
            trace_id=int(task.trace_id, 16),
            span_id=int.from_bytes(os.urandom(8), "big") or 1,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(NonRecordingSpan(remote))
    return None


class Attempt:
    """The span of one attempt."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def reporting(self, report: Callable[[Outcome], None]) -> Callable[[Outcome], None]:
        """``report``, also recording the outcome on the span (``report`` itself when there is
        no OpenTelemetry)."""
        span = self._span
        if span is None:
            return report

        def traced(outcome: Outcome) -> None:
            span.set_attribute("taskq.outcome", str(outcome.kind))
            if outcome.error_type:
                span.set_attribute("error.type", outcome.error_type)
                trace = _otel()
                span.set_status(trace.Status(trace.StatusCode.ERROR, outcome.error_type))
            report(outcome)

        return traced


_NO_SPAN = Attempt(None)


@functools.cache
def _provider_from_env() -> bool:
    return "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _no_sdk(trace: Any) -> bool:
    """No SDK provider is set (the API's proxy or no-op provider): every span would be the
    API's no-op one. Asked at each attempt, so an SDK configured later is picked up. The API's
    global is read first: ``get_tracer_provider`` looks the environment up on every call."""
    if getattr(trace, "_TRACER_PROVIDER", False) is None and not _provider_from_env():
        return True
    return isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


@contextlib.contextmanager
def _parent_only(task: ClaimedTask) -> Iterator[Attempt]:
    """Without an SDK the API's no-op tracer makes the parent's span current and records
    nothing. Only a stored traceparent needs that (a child enqueued by the handler carries it
    on); a parent made up from the task's trace_id would be a random span id in the trace the
    child already inherits. So: attach the stored traceparent's context, else nothing."""
    from opentelemetry import context

    token = context.attach(_parent(task))
    try:
        yield _NO_SPAN
    finally:
        context.detach(token)


def attempt_span(
    task: ClaimedTask, worker_id: str
) -> contextlib.AbstractContextManager[Attempt] | None:
    """The context to run one attempt in, its span current for the handler (sync or async);
    None when there is nothing to do (no OpenTelemetry, or no SDK and no stored traceparent)."""
    trace = _otel()
    if trace is None or _no_sdk(trace):
        # The hot path when tracing is off: no span, no context switch (was ~15% of a
        # draining worker's CPU with the API installed and no SDK).
        if trace is None or not task.traceparent:
            return None
        return _parent_only(task)
    return _span(trace, task, worker_id)


@contextlib.contextmanager
def _span(trace: Any, task: ClaimedTask, worker_id: str) -> Iterator[Attempt]:
    tracer = trace.get_tracer("taskq")
    with tracer.start_as_current_span(
        f"taskq.attempt {task.task_type}",
        context=_parent(task),
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "taskq.task_id": task.id,
            "taskq.task_type": task.task_type,
            "taskq.queue": task.queue,
            "taskq.attempt": task.retry_count,
            "taskq.worker_id": worker_id,
            "messaging.system": "taskq",
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield Attempt(span)
