"""The App: a registry of task handlers, and the enqueue API.

Enqueueing always happens on the *caller's* psycopg connection, so the task row joins the
caller's open transaction: it exists if and only if the business change commits.
"""

from __future__ import annotations

import datetime as dt
import inspect
import math
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, overload

import psycopg

from taskq import store
from taskq.config import resolve_dsn
from taskq.context import TaskContext
from taskq.errors import ConfigError, InvalidTask
from taskq.model import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_QUEUE,
    JSON,
    TaskOptions,
    check_name,
    check_priority,
    encode_payload,
    new_trace_id,
)

Handler = Callable[[TaskContext, JSON], Any]
"""``fn(ctx, payload)``; a plain function or an ``async def``."""


@dataclass(frozen=True, slots=True)
class EnqueueItem:
    """One task for :meth:`App.enqueue_many`."""

    task_type: str
    payload: JSON = None
    biz_id: str | None = None
    priority: int | None = None
    queue: str | None = None
    delay: float | None = None
    scheduled_at: dt.datetime | None = None
    trace_id: str | None = None


class Task:
    """A registered handler. Calling it runs the function directly (handy in unit tests);
    ``.enqueue(conn, payload, ...)`` puts a task for it on the queue."""

    def __init__(self, app: App, fn: Handler, options: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", options.task_type)

    @property
    def task_type(self) -> str:
        return self.options.task_type

    def __call__(self, ctx: TaskContext, payload: JSON) -> Any:
        return self.fn(ctx, payload)

    def __repr__(self) -> str:
        return f"<taskq.Task {self.task_type!r} queue={self.options.queue!r}>"

    @overload
    def enqueue(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> Coroutine[Any, Any, int]: ...

    @overload
    def enqueue(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> int: ...

    def enqueue(
        self,
        conn: Any,
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> int | Coroutine[Any, Any, int]:
        result: int | Coroutine[Any, Any, int] = self.app.enqueue(
            conn,
            self.task_type,
            payload,
            biz_id=biz_id,
            priority=priority,
            queue=queue,
            delay=delay,
            scheduled_at=scheduled_at,
            trace_id=trace_id,
        )
        return result


class App:
    """The task registry, and the entry point for enqueueing.

    ``dsn`` is only needed by whoever runs workers or CLI commands through this app; enqueueing
    uses the connection you pass. Without ``dsn``, ``TASKQ_DSN`` is used, else the embedded
    server (started on first use).
    """

    def __init__(self, dsn: str | None = None, *, max_payload_bytes: int | None = None) -> None:
        self._dsn = dsn
        self.max_payload_bytes = max_payload_bytes or _env_payload_limit()
        self.tasks: dict[str, Task] = {}

    @property
    def dsn(self) -> str:
        if self._dsn is None:
            self._dsn = resolve_dsn(None)
        return self._dsn

    # --- registry --------------------------------------------------------------------------

    def task(
        self,
        task_type: str,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_retry_count: int = 5,
        timeout: float = 1800,
        retry_delay: float = 60.0,
        retry_jitter: float = 30.0,
    ) -> Callable[[Handler], Task]:
        """Register ``fn(ctx, payload)`` as the handler of ``task_type``.

        ``timeout`` (seconds) bounds one attempt; ``retry_delay`` and ``retry_jitter`` shape
        the backoff ``delay * 2**retry_count + random(0, jitter)``.
        """
        check_name("task type", task_type)
        check_name("queue", queue)
        check_priority(priority)
        if max_retry_count < 0:
            raise ConfigError("max_retry_count must be >= 0")
        if timeout <= 0:
            raise ConfigError("timeout must be > 0 seconds")
        if retry_delay < 0 or retry_jitter < 0:
            raise ConfigError("retry_delay and retry_jitter must be >= 0")
        options = TaskOptions(
            task_type=task_type,
            queue=queue,
            priority=priority,
            max_retry_count=max_retry_count,
            timeout_seconds=max(1, math.ceil(timeout)),
            retry_delay_seconds=float(retry_delay),
            retry_jitter_seconds=float(retry_jitter),
        )

        def register(fn: Handler) -> Task:
            if task_type in self.tasks:
                raise ConfigError(f"task type {task_type!r} is registered twice")
            handle = Task(self, fn, options)
            self.tasks[task_type] = handle
            return handle

        return register

    def options_for(self, task_type: str) -> TaskOptions:
        """The registered options, or the defaults for a type this app does not handle
        (a producer may enqueue work that another service's workers run)."""
        registered = self.tasks.get(task_type)
        return registered.options if registered else TaskOptions(task_type=task_type)

    # --- enqueue ---------------------------------------------------------------------------

    def _params(
        self,
        task_type: str,
        payload: JSON,
        *,
        biz_id: str | None,
        priority: int | None,
        queue: str | None,
        delay: float | None,
        scheduled_at: dt.datetime | None,
        trace_id: str | None,
    ) -> dict[str, Any]:
        check_name("task type", task_type)
        registered = task_type in self.tasks
        opts = self.options_for(task_type)
        if biz_id is not None and not isinstance(biz_id, str):
            raise InvalidTask(f"biz_id must be a string, got {type(biz_id).__name__}")
        if delay is not None and (not isinstance(delay, int | float) or delay < 0):
            raise InvalidTask(f"delay must be a number of seconds >= 0, got {delay!r}")
        if scheduled_at is not None and scheduled_at.tzinfo is None:
            raise InvalidTask("scheduled_at must be timezone-aware")
        return {
            "task_type": task_type,
            "queue": check_name("queue", queue if queue is not None else opts.queue),
            "biz_id": biz_id,
            "payload": encode_payload({} if payload is None else payload, self.max_payload_bytes),
            "priority": check_priority(priority if priority is not None else opts.priority),
            "scheduled_at": scheduled_at,
            "delay": float(delay) if delay is not None else None,
            # A type this app does not handle leaves them NULL: the handler that claims it
            # fills in its own settings.
            "max_retry_count": opts.max_retry_count if registered else None,
            "timeout_seconds": opts.timeout_seconds if registered else None,
            "trace_id": trace_id or new_trace_id(),
        }

    @overload
    def enqueue(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        task_type: str,
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> Coroutine[Any, Any, int]: ...

    @overload
    def enqueue(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        task_type: str,
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> int: ...

    def enqueue(
        self,
        conn: Any,
        task_type: str,
        payload: JSON = None,
        *,
        biz_id: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        delay: float | None = None,
        scheduled_at: dt.datetime | None = None,
        trace_id: str | None = None,
    ) -> int | Coroutine[Any, Any, int]:
        """Insert one task in ``conn``'s current transaction and return its id.

        With an async connection (or cursor) this returns a coroutine: ``await
        app.enqueue(aconn, ...)``. Validation happens before anything is sent, so a bad name,
        priority or payload raises :class:`taskq.InvalidTask` and writes nothing.
        """
        params = self._params(
            task_type,
            payload,
            biz_id=biz_id,
            priority=priority,
            queue=queue,
            delay=delay,
            scheduled_at=scheduled_at,
            trace_id=trace_id,
        )
        if isinstance(conn, psycopg.AsyncConnection | psycopg.AsyncCursor):
            return store.ainsert_task(conn, params)
        if isinstance(conn, psycopg.Connection | psycopg.Cursor):
            return store.insert_task(conn, params)
        raise TypeError(f"enqueue needs a psycopg connection or cursor, got {type(conn).__name__}")

    def _many_params(self, items: Iterable[EnqueueItem | Mapping[str, Any]]) -> dict[str, Any]:
        columns: dict[str, list[Any]] = {
            k: []
            for k in (
                "task_types",
                "queues",
                "biz_ids",
                "payloads",
                "priorities",
                "scheduled_ats",
                "delays",
                "max_retry_counts",
                "timeouts",
                "trace_ids",
            )
        }
        for raw in items:
            item = raw if isinstance(raw, EnqueueItem) else EnqueueItem(**raw)
            p = self._params(
                item.task_type,
                item.payload,
                biz_id=item.biz_id,
                priority=item.priority,
                queue=item.queue,
                delay=item.delay,
                scheduled_at=item.scheduled_at,
                trace_id=item.trace_id,
            )
            columns["task_types"].append(p["task_type"])
            columns["queues"].append(p["queue"])
            columns["biz_ids"].append(p["biz_id"])
            columns["payloads"].append(p["payload"])
            columns["priorities"].append(p["priority"])
            columns["scheduled_ats"].append(p["scheduled_at"])
            columns["delays"].append(p["delay"])
            columns["max_retry_counts"].append(p["max_retry_count"])
            columns["timeouts"].append(p["timeout_seconds"])
            columns["trace_ids"].append(p["trace_id"])
        return columns

    @overload
    def enqueue_many(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        items: Iterable[EnqueueItem | Mapping[str, Any]],
    ) -> Coroutine[Any, Any, list[int]]: ...

    @overload
    def enqueue_many(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        items: Iterable[EnqueueItem | Mapping[str, Any]],
    ) -> list[int]: ...

    def enqueue_many(
        self, conn: Any, items: Iterable[EnqueueItem | Mapping[str, Any]]
    ) -> list[int] | Coroutine[Any, Any, list[int]]:
        """Insert many tasks in one statement (one round trip, one NOTIFY); ids in order.

        Items are :class:`EnqueueItem` or mappings with the same keys. Every item is validated
        first; one bad item raises and nothing is written.
        """
        params = self._many_params(items)
        if isinstance(conn, psycopg.AsyncConnection | psycopg.AsyncCursor):
            return store.ainsert_tasks(conn, params)
        if isinstance(conn, psycopg.Connection | psycopg.Cursor):
            return store.insert_tasks(conn, params)
        raise TypeError(f"enqueue needs a psycopg connection or cursor, got {type(conn).__name__}")

    async def aenqueue(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        task_type: str,
        payload: JSON = None,
        **kwargs: Any,
    ) -> int:
        """``await app.aenqueue(aconn, ...)``: the async spelling of :meth:`enqueue`."""
        return await self.enqueue(conn, task_type, payload, **kwargs)


def _env_payload_limit() -> int:
    """``TASKQ_MAX_PAYLOAD_BYTES`` (e.g. for ``taskq enqueue``), else the default (4 MiB)."""
    import os

    raw = os.environ.get("TASKQ_MAX_PAYLOAD_BYTES")
    if not raw:
        return DEFAULT_MAX_PAYLOAD_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"TASKQ_MAX_PAYLOAD_BYTES must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError("TASKQ_MAX_PAYLOAD_BYTES must be > 0")
    return value


def load_app(spec: str) -> App:
    """Import ``module:attribute`` and return the App it names (for ``--app``)."""
    import importlib
    import sys

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app must look like module:attribute, got {spec!r}")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the current directory is importable
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(value, App):
        raise ConfigError(f"{spec} is a {type(value).__name__}, not a taskq.App")
    return value
