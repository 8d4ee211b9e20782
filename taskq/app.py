"""The App: a registry of task handlers, schedules and reconcilers, and the enqueue API.

Enqueueing always happens on the *caller's* connection (psycopg 3, or a SQLAlchemy session,
Django connection or asyncpg connection: ``taskq.integrations``), so the task row joins the
caller's open transaction: it exists if and only if the business change commits.
"""

from __future__ import annotations

import datetime as dt
import inspect
import math
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, TypedDict, TypeVar, Unpack, overload

import psycopg

from taskq import integrations, tracing
from taskq.context import TaskContext
from taskq.db import store
from taskq.db.store._base import schema_required
from taskq.errors import AlreadyEnqueued, ConfigError, InvalidTask, TaskqError
from taskq.model import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_QUEUE,
    JSON,
    MAX_TRACE_ID_LENGTH,
    FlowLimits,
    Status,
    TaskOptions,
    check_key,
    check_name,
    check_priority,
    encode_payload,
    new_trace_id,
    parse_rate,
)
from taskq.schedules import CatchUp, Schedule, parse_every, parse_spec

_T = TypeVar("_T")

Handler = Callable[[TaskContext, JSON], Any]
"""``fn(ctx, payload)``; a plain function or an ``async def``."""

Reconcile = Callable[[psycopg.Connection[Any]], Iterable[str | tuple[str, JSON]]]
"""``fn(conn)`` returning the business keys (or ``(key, payload)`` pairs) that should have a
task. ``conn`` is a psycopg connection to the taskq database with the default (tuple) rows."""

OnDuplicate = Literal["return", "raise"]
RECONCILE_TASK = "taskq.reconcile"


class EnqueueOptions(TypedDict, total=False):
    """Keyword options of :meth:`App.enqueue` (all optional)."""

    biz_id: str | None
    priority: int | None
    queue: str | None
    delay: float | None
    scheduled_at: dt.datetime | None
    trace_id: str | None
    unique: bool
    unique_key: str | None
    on_duplicate: OnDuplicate
    ordering_key: str | None
    parent_id: int | None
    concurrency_key: str | None


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
    unique: bool = False
    unique_key: str | None = None
    ordering_key: str | None = None
    parent_id: int | None = None
    concurrency_key: str | None = None


_ITEM_FIELDS = frozenset(f.name for f in fields(EnqueueItem))
_PLAIN_ITEM = frozenset({"task_type", "payload"})


@dataclass(frozen=True, slots=True)
class Reconciler:
    name: str
    task_type: str
    fn: Reconcile
    every_seconds: float


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
        **options: Unpack[EnqueueOptions],
    ) -> Coroutine[Any, Any, int]: ...

    @overload
    def enqueue(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        payload: JSON = None,
        **options: Unpack[EnqueueOptions],
    ) -> int: ...

    @overload
    def enqueue(
        self, conn: object, payload: JSON = None, **options: Unpack[EnqueueOptions]
    ) -> Any: ...

    def enqueue(
        self, conn: Any, payload: JSON = None, **options: Unpack[EnqueueOptions]
    ) -> int | Coroutine[Any, Any, int]:
        result: int | Coroutine[Any, Any, int] = self.app.enqueue(
            conn, self.task_type, payload, **options
        )
        return result


class App:
    """The task registry, and the entry point for enqueueing.

    ``dsn`` is only needed by whoever runs workers or CLI commands through this app; enqueueing
    uses the connection you pass. Without ``dsn``, ``TASKQ_DSN`` is used (read here, once).
    ``app.dsn`` is None when neither is set: the worker or the CLI then falls back to the
    embedded server when it starts, never this object (constructing or reading an App starts
    nothing).
    """

    def __init__(self, dsn: str | None = None, *, max_payload_bytes: int | None = None) -> None:
        self.dsn: str | None = dsn or os.environ.get("TASKQ_DSN") or None
        self.max_payload_bytes = max_payload_bytes or _env_payload_limit()
        self.tasks: dict[str, Task] = {}
        self.schedules: dict[str, Schedule] = {}
        self.reconcilers: dict[str, Reconciler] = {}
        self._good_names: set[str] = set()
        self._default_options: dict[str, TaskOptions] = {}
        self._plain: dict[str, dict[str, Any]] = {}

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
        idempotent: bool = False,
        essential: bool = False,
        max_running: int | None = None,
        max_running_per_key: int | None = None,
        rate: str | None = None,
        burst: float | None = None,
        fair: bool = False,
    ) -> Callable[[Handler], Task]:
        """Register ``fn(ctx, payload)`` as the handler of ``task_type``.

        ``timeout`` (seconds) bounds one attempt; ``retry_delay`` and ``retry_jitter`` shape
        the backoff ``delay * 2**retry_count + random(0, jitter)``. ``idempotent=True`` runs the
        handler in one transaction with the (task_type, biz_id) dedup row and the SUCCESS update
        (``ctx.conn`` / ``ctx.aconn``): its business writes commit exactly once per biz_id.
        ``essential=True`` keeps the type running when protection is at L2 (DEGRADED).

        Flow control, cluster-wide and exact (``taskq limits set`` changes it at run time):
        ``max_running`` caps the attempts of this type running at once across every worker;
        ``rate="20/s"`` (or ``/m``, ``/h``) caps attempt starts, with a token bucket of
        ``burst`` tokens (default: one second's worth); ``max_running_per_key`` caps the running
        attempts per ``concurrency_key`` (set at enqueue); ``fair=True`` claims round-robin
        across keys. Tasks held back by a limit stay PENDING, never failed.
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
        flow = _flow_limits(max_running, max_running_per_key, rate, burst, fair)
        options = TaskOptions(
            task_type=task_type,
            queue=queue,
            priority=priority,
            max_retry_count=max_retry_count,
            timeout_seconds=max(1, math.ceil(timeout)),
            retry_delay_seconds=float(retry_delay),
            retry_jitter_seconds=float(retry_jitter),
            idempotent=idempotent,
            essential=essential,
            limits=flow,
        )

        def register(fn: Handler) -> Task:
            if task_type in self.tasks:
                raise ConfigError(f"task type {task_type!r} is registered twice")
            handle = Task(self, fn, options)
            self.tasks[task_type] = handle
            self._plain.pop(task_type, None)  # its routing and options change
            return handle

        return register

    def periodic(
        self,
        spec: str,
        *,
        task_type: str | None = None,
        payload: JSON = None,
        timezone: str = "UTC",
        catch_up: CatchUp = "skip",
        backfill_limit: int = 10,
        name: str | None = None,
        **task_options: Any,
    ) -> Callable[[Handler | Task], Task]:
        """Enqueue a task on a cron schedule (``"*/5 * * * *"``) or an interval
        (``"every 10m"``), exactly once per tick however many workers run.

        Decorate a handler (it is registered as ``task_type`` with ``task_options``), or an
        existing :class:`Task`. ``catch_up`` says what happens to ticks missed while no worker
        ran: ``skip`` them, ``run_once`` for all of them, or ``backfill`` up to
        ``backfill_limit``; every missed tick is recorded either way.
        """
        parse_spec(spec, timezone)  # fail at import time, not at the first tick

        def register(target: Handler | Task) -> Task:
            if isinstance(target, Task):
                handle = target
            else:
                if task_type is None:
                    raise ConfigError("@app.periodic on a function needs task_type=...")
                handle = self.task(task_type, **task_options)(target)
            if task_type is not None and task_type != handle.task_type:
                raise ConfigError(f"periodic task_type {task_type!r} != {handle.task_type!r}")
            self.add_schedule(
                Schedule(
                    name=name or f"{handle.task_type}@{spec}",
                    task_type=handle.task_type,
                    spec=spec,
                    timezone=timezone,
                    payload={} if payload is None else payload,
                    catch_up=catch_up,
                    backfill_limit=backfill_limit,
                )
            )
            return handle

        return register

    def add_schedule(self, schedule: Schedule) -> None:
        check_name("schedule name", schedule.name)
        if schedule.catch_up not in ("skip", "run_once", "backfill"):
            raise ConfigError(f"catch_up must be skip, run_once or backfill: {schedule.catch_up!r}")
        if schedule.name in self.schedules:
            raise ConfigError(f"schedule {schedule.name!r} is registered twice")
        parse_spec(schedule.spec, schedule.timezone)
        self.schedules[schedule.name] = schedule

    def reconciler(
        self, task_type: str, *, every: str, name: str | None = None, queue: str | None = None
    ) -> Callable[[Reconcile], Reconcile]:
        """Register ``fn(conn) -> keys`` that lists the business keys which *should* have a
        ``task_type`` task. Every ``every`` (e.g. ``"1d"``, ``"6h"``), and by hand with
        ``taskq reconcile``, taskq enqueues the keys that have no task at all, unique on
        (task_type, biz_id), so running it twice adds nothing."""
        check_name("task type", task_type)
        seconds = parse_every(every)
        label = name or task_type
        check_name("reconciler name", label)
        if label in self.reconcilers:
            raise ConfigError(f"reconciler {label!r} is registered twice")
        target = self.tasks.get(task_type)
        run_queue = queue or (target.options.queue if target else DEFAULT_QUEUE)

        def register(fn: Reconcile) -> Reconcile:
            self.reconcilers[label] = Reconciler(label, task_type, fn, seconds)
            if RECONCILE_TASK not in self.tasks:
                from taskq.ops.reconcile import reconcile_handler

                self.task(RECONCILE_TASK, queue=run_queue, max_retry_count=3)(reconcile_handler)
            self.add_schedule(
                Schedule(
                    name=f"reconcile:{label}",
                    task_type=RECONCILE_TASK,
                    spec=f"every {every}",
                    timezone="UTC",
                    payload={"reconciler": label},
                    catch_up="run_once",
                    backfill_limit=1,
                )
            )
            return fn

        return register

    def options_for(self, task_type: str) -> TaskOptions:
        """The registered options, or the defaults for a type this app does not handle
        (a producer may enqueue work that another service's workers run)."""
        registered = self.tasks.get(task_type)
        if registered is not None:
            return registered.options
        defaults = self._default_options.get(task_type)
        if defaults is None:
            defaults = self._default_options[task_type] = TaskOptions(task_type=task_type)
        return defaults

    def type_registry(self) -> list[dict[str, Any]]:
        """The rows this app writes to ``taskq.task_types`` (the routing registry): every
        registered type with its queue and options, and every reconciled type (queue and
        options None when this app does not run it)."""
        reconciled = {r.task_type for r in self.reconcilers.values()}
        rows = [
            {
                "task_type": t.task_type,
                "queue": t.options.queue,
                "max_retry_count": t.options.max_retry_count,
                "timeout_seconds": t.options.timeout_seconds,
                "reconciled": t.task_type in reconciled,
            }
            for t in self.tasks.values()
        ]
        rows += [
            {
                "task_type": name,
                "queue": None,
                "max_retry_count": None,
                "timeout_seconds": None,
                "reconciled": True,
            }
            for name in sorted(reconciled - set(self.tasks))
        ]
        return rows

    # --- enqueue ---------------------------------------------------------------------------

    def _name(self, kind: str, value: Any) -> str:
        """check_name, remembered: bulk enqueues repeat the same few names thousands of times."""
        if isinstance(value, str) and value in self._good_names:
            return value
        check_name(kind, value)
        if len(self._good_names) < 10_000:
            self._good_names.add(value)
        return str(value)

    def _params(
        self, task_type: str, payload: JSON, options: EnqueueOptions | Mapping[str, Any]
    ) -> dict[str, Any]:
        self._name("task type", task_type)
        registered = task_type in self.tasks
        opts = self.options_for(task_type)
        biz_id = options.get("biz_id")
        delay = options.get("delay")
        scheduled_at = options.get("scheduled_at")
        priority = options.get("priority")
        queue = options.get("queue")
        check_key("biz_id", biz_id)
        if opts.idempotent and not biz_id:
            raise InvalidTask(f"{task_type!r} is idempotent: enqueue it with a biz_id")
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
            or delay < 0
        ):
            raise InvalidTask(f"delay must be a number of seconds >= 0, got {delay!r}")
        if scheduled_at is not None and scheduled_at.tzinfo is None:
            raise InvalidTask("scheduled_at must be timezone-aware")
        unique_key = options.get("unique_key")
        if options.get("unique") and unique_key is None:
            if not biz_id:
                raise InvalidTask("unique=True uses the biz_id as the key: pass biz_id")
            unique_key = biz_id
        check_key("unique_key", unique_key)
        ordering_key = check_key("ordering_key", options.get("ordering_key"))
        trace_id = check_key("trace_id", options.get("trace_id"), MAX_TRACE_ID_LENGTH)
        concurrency_key = options.get("concurrency_key")
        if concurrency_key is not None:
            check_name("concurrency_key", concurrency_key)
        traceparent, span_trace_id = tracing.current()
        return {
            "task_type": task_type,
            # A type this app does not handle, enqueued without a queue, goes to NULL: the
            # routing trigger gives it the queue its workers registered (else 'default').
            "queue": (
                self._name("queue", queue)
                if queue is not None
                else (opts.queue if registered else None)
            ),
            "biz_id": biz_id,
            "payload": encode_payload({} if payload is None else payload, self.max_payload_bytes),
            "priority": check_priority(priority if priority is not None else opts.priority),
            "scheduled_at": scheduled_at,
            "delay": float(delay) if delay is not None else None,
            # A type this app does not handle leaves them NULL: the routing trigger fills in
            # what its workers registered, else the first claim the handler's settings.
            "max_retry_count": opts.max_retry_count if registered else None,
            "timeout_seconds": opts.timeout_seconds if registered else None,
            # With OpenTelemetry (taskq[otel]) and a span current, the task joins its trace.
            "trace_id": trace_id or span_trace_id or new_trace_id(),
            "traceparent": traceparent,
            "unique_key": unique_key,
            "ordering_key": ordering_key,
            "parent_id": options.get("parent_id"),
            "concurrency_key": concurrency_key,
        }

    @overload
    def enqueue(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        task_type: str,
        payload: JSON = None,
        **options: Unpack[EnqueueOptions],
    ) -> Coroutine[Any, Any, int]: ...

    @overload
    def enqueue(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        task_type: str,
        payload: JSON = None,
        **options: Unpack[EnqueueOptions],
    ) -> int: ...

    @overload
    def enqueue(
        self,
        conn: object,
        task_type: str,
        payload: JSON = None,
        **options: Unpack[EnqueueOptions],
    ) -> Any: ...

    def enqueue(
        self, conn: Any, task_type: str, payload: JSON = None, **options: Unpack[EnqueueOptions]
    ) -> int | Coroutine[Any, Any, int]:
        """Insert one task in ``conn``'s current transaction and return its id.

        With an async connection (or cursor) this returns a coroutine: ``await
        app.enqueue(aconn, ...)``. ``conn`` may also be a SQLAlchemy ``Session`` or
        ``Connection`` or a Django connection (the id), or an ``AsyncSession``,
        ``AsyncConnection`` or asyncpg connection (a coroutine): see ``taskq.integrations``.
        Validation happens before anything is sent, so a bad name,
        priority or payload raises :class:`taskq.InvalidTask` and writes nothing.

        ``unique=True`` (key: the biz_id) or ``unique_key=...`` refuses a second *live* task
        of the same type and key: you get the existing task's id back, or
        :class:`taskq.AlreadyEnqueued` with ``on_duplicate="raise"``. ``ordering_key`` makes
        tasks sharing it run one at a time, in enqueue order.
        """
        if options:
            params = self._params(task_type, payload, options)
        else:
            params = self._plain_params(task_type, payload, *tracing.current())
        on_duplicate = options.get("on_duplicate", "return")
        if isinstance(conn, _PSYCOPG_SYNC):
            return self._insert_one(conn, params, on_duplicate)
        if isinstance(conn, _PSYCOPG_ASYNC):
            return self._ainsert_one(conn, params, on_duplicate)
        return _through(
            conn,
            lambda driver: self._insert_one(driver, params, on_duplicate),
            lambda driver: self._ainsert_one(driver, params, on_duplicate),
        )

    def _insert_one(self, conn: store.SyncTarget, params: dict[str, Any], on_dup: str) -> int:
        with schema_required():
            return self._insert_one_unchecked(conn, params, on_dup)

    def _insert_one_unchecked(
        self, conn: store.SyncTarget, params: dict[str, Any], on_dup: str
    ) -> int:
        for _ in range(3):
            new_id = store.insert_task(conn, params)
            if new_id is not None:
                return new_id
            key = (params["task_type"], params["unique_key"])
            existing = store.find_live_tasks(conn, [key]).get(key)
            if existing is not None:
                return _duplicate(key, existing, on_dup)
            # The live task finished between the two statements: try again.
        raise TaskqError(f"could not enqueue unique task {params['unique_key']!r}: key churning")

    async def _ainsert_one(
        self, conn: store.AsyncTarget, params: dict[str, Any], on_dup: str
    ) -> int:
        with schema_required():
            return await self._ainsert_one_unchecked(conn, params, on_dup)

    async def _ainsert_one_unchecked(
        self, conn: store.AsyncTarget, params: dict[str, Any], on_dup: str
    ) -> int:
        for _ in range(3):
            new_id = await store.ainsert_task(conn, params)
            if new_id is not None:
                return new_id
            key = (params["task_type"], params["unique_key"])
            existing = (await store.afind_live_tasks(conn, [key])).get(key)
            if existing is not None:
                return _duplicate(key, existing, on_dup)
        raise TaskqError(f"could not enqueue unique task {params['unique_key']!r}: key churning")

    def _many_params(
        self, items: Iterable[EnqueueItem | Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        every: list[dict[str, Any]] = []
        traceparent, span_trace_id = tracing.current()
        for raw in items:
            fields: Mapping[str, Any]
            if isinstance(raw, EnqueueItem):
                fields = {name: getattr(raw, name) for name in _ITEM_FIELDS}
            else:
                if not _ITEM_FIELDS.issuperset(raw.keys()):
                    unknown = raw.keys() - _ITEM_FIELDS
                    raise InvalidTask(f"unknown enqueue field(s): {', '.join(sorted(unknown))}")
                if "task_type" not in raw:
                    raise InvalidTask("an enqueue item needs a task_type")
                fields = raw
                if _is_plain(raw):
                    every.append(
                        self._plain_params(
                            raw["task_type"], raw.get("payload"), traceparent, span_trace_id
                        )
                    )
                    continue
            every.append(self._params(fields["task_type"], fields.get("payload"), fields))
        return every

    def _plain_params(
        self, task_type: str, payload: JSON, traceparent: str | None, span_trace_id: str | None
    ) -> dict[str, Any]:
        """A task type and a payload, nothing else (the usual bulk item, and an enqueue without
        options): every field but the payload and the trace is the same for all tasks of the
        type, so the checked params of its first one are kept and copied (about 3 us a task
        less than _params)."""
        base = self._plain.get(task_type) if isinstance(task_type, str) else None
        if base is None:
            params = self._params(task_type, payload, {})
            if len(self._plain) < 1_000:
                self._plain[task_type] = dict(params)
            return params
        params = base.copy()
        params["payload"] = encode_payload(
            {} if payload is None else payload, self.max_payload_bytes
        )
        params["trace_id"] = span_trace_id or new_trace_id()
        params["traceparent"] = traceparent
        return params

    @overload
    def enqueue_many(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        on_duplicate: OnDuplicate = "return",
    ) -> Coroutine[Any, Any, list[int]]: ...

    @overload
    def enqueue_many(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        on_duplicate: OnDuplicate = "return",
    ) -> list[int]: ...

    @overload
    def enqueue_many(
        self,
        conn: object,
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        on_duplicate: OnDuplicate = "return",
    ) -> Any: ...

    def enqueue_many(
        self,
        conn: Any,
        items: Iterable[EnqueueItem | Mapping[str, Any]],
        *,
        on_duplicate: OnDuplicate = "return",
    ) -> list[int] | Coroutine[Any, Any, list[int]]:
        """Insert many tasks in one statement (one NOTIFY); their ids in order.

        Items are :class:`EnqueueItem` or mappings with the same keys. One bad item raises
        :class:`taskq.InvalidTask` and nothing is written; the caller's transaction goes on
        as it was. (Plain items, a task type and a payload, are checked while the COPY
        streams, behind a savepoint; others all before anything is sent.) An item whose
        unique key is held by a live task (or by an earlier item) gets that task's id, or
        raises with ``on_duplicate="raise"``.
        """
        batch = items if isinstance(items, list) else list(items)
        if batch and all(_is_plain(raw) for raw in batch):
            if isinstance(conn, _PSYCOPG_ASYNC):
                return self._astream_plain(conn, batch)
            if isinstance(conn, _PSYCOPG_SYNC):
                return self._stream_plain(conn, batch)
        every = self._many_params(batch)
        if isinstance(conn, _PSYCOPG_ASYNC):
            return self._ainsert_many(conn, every, on_duplicate)
        if isinstance(conn, _PSYCOPG_SYNC):
            return self._insert_many(conn, every, on_duplicate)
        return _through(
            conn,
            lambda driver: self._insert_many(driver, every, on_duplicate),
            lambda driver: self._ainsert_many(driver, every, on_duplicate),
        )

    def _plain_rows(self, batch: list[Any]) -> Iterator[dict[str, Any]]:
        """The params of plain items, checked one by one as the COPY consumes them."""
        traceparent, span_trace_id = tracing.current()
        return (
            self._plain_params(raw["task_type"], raw.get("payload"), traceparent, span_trace_id)
            for raw in batch
        )

    def _stream_plain(self, conn: store.SyncTarget, batch: list[Any]) -> list[int]:
        """Plain items (a task type and a payload) through psycopg: each is checked as the
        COPY streams, while the server inserts the rows before it (store.copy_plain_tasks)."""
        with schema_required():
            rows = self._plain_rows(batch)
            ids = store.copy_plain_tasks(conn, len(batch), rows)
            if ids is not None:
                return ids
            return self._insert_many_unchecked(conn, self._many_params(batch), "return")

    async def _astream_plain(self, conn: store.AsyncTarget, batch: list[Any]) -> list[int]:
        with schema_required():
            rows = self._plain_rows(batch)
            ids = await store.acopy_plain_tasks(conn, len(batch), rows)
            if ids is not None:
                return ids
            every = self._many_params(batch)
            return await self._ainsert_many_unchecked(conn, every, "return")

    def _insert_many(
        self, conn: store.SyncTarget, every: list[dict[str, Any]], on_duplicate: str
    ) -> list[int]:
        with schema_required():
            return self._insert_many_unchecked(conn, every, on_duplicate)

    def _insert_many_unchecked(
        self, conn: store.SyncTarget, every: list[dict[str, Any]], on_duplicate: str
    ) -> list[int]:
        if every and not any(p["unique_key"] for p in every):
            copied = store.copy_tasks(conn, every)
            if copied is not None:
                return copied
        inserted = store.insert_tasks(conn, _columns(every))
        missing = _unmatched(every, inserted)
        found = store.find_live_tasks(conn, missing) if missing else {}
        return _ids_in_order(every, inserted, found, on_duplicate)

    async def _ainsert_many(
        self, conn: store.AsyncTarget, every: list[dict[str, Any]], on_duplicate: str
    ) -> list[int]:
        with schema_required():
            return await self._ainsert_many_unchecked(conn, every, on_duplicate)

    async def _ainsert_many_unchecked(
        self, conn: store.AsyncTarget, every: list[dict[str, Any]], on_duplicate: str
    ) -> list[int]:
        if every and not any(p["unique_key"] for p in every):
            copied = await store.acopy_tasks(conn, every)
            if copied is not None:
                return copied
        inserted = await store.ainsert_tasks(conn, _columns(every))
        missing = _unmatched(every, inserted)
        found = await store.afind_live_tasks(conn, missing) if missing else {}
        return _ids_in_order(every, inserted, found, on_duplicate)

    async def aenqueue(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        task_type: str,
        payload: JSON = None,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """``await app.aenqueue(aconn, ...)``: the async spelling of :meth:`enqueue`."""
        task_id: int = await self.enqueue(conn, task_type, payload, **options)
        return task_id

    # --- cancel and business switches ----------------------------------------------------

    @overload
    def cancel(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        task_id: int,
        *,
        with_children: bool = False,
        note: str | None = None,
    ) -> Coroutine[Any, Any, Status]: ...

    @overload
    def cancel(
        self,
        conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
        task_id: int,
        *,
        with_children: bool = False,
        note: str | None = None,
    ) -> Status: ...

    def cancel(
        self,
        conn: Any,
        task_id: int,
        *,
        with_children: bool = False,
        note: str | None = None,
    ) -> Status | Coroutine[Any, Any, Status]:
        """Cancel a task in ``conn``'s current transaction (a rollback undoes it).

        A PENDING or FAILED task becomes CANCELLED and never runs; a PROCESSING one is asked to
        abort (its worker cancels an async handler and sets ``ctx.cancelled``), and ends
        CANCELLED. Returns the status the task has now: CANCELLED, or PROCESSING for an abort
        requested. A SUCCESS or DEAD_LETTER task raises :class:`taskq.InvalidTask`; an unknown
        id :class:`taskq.TaskNotFound`. Audited (actor: the database login).
        """
        if isinstance(conn, _PSYCOPG_ASYNC):
            return self._acancel(conn, task_id, with_children, note)
        if isinstance(conn, _PSYCOPG_SYNC):
            rows = store.cancel_tasks(conn, [task_id], with_children=with_children, note=note)
            return _cancelled_status(rows, task_id)
        raise TypeError(f"cancel needs a psycopg connection or cursor, got {type(conn).__name__}")

    async def _acancel(
        self, conn: store.AsyncTarget, task_id: int, with_children: bool, note: str | None
    ) -> Status:
        rows = await store.acancel_tasks(conn, [task_id], with_children=with_children, note=note)
        return _cancelled_status(rows, task_id)

    @overload
    def switch(
        self,
        conn: psycopg.AsyncConnection[Any] | psycopg.AsyncCursor[Any],
        name: str,
        default: bool = True,
    ) -> Coroutine[Any, Any, bool]: ...

    @overload
    def switch(
        self, conn: psycopg.Connection[Any] | psycopg.Cursor[Any], name: str, default: bool = True
    ) -> bool: ...

    def switch(
        self, conn: Any, name: str, default: bool = True
    ) -> bool | Coroutine[Any, Any, bool]:
        """A business switch, read now (one query; handlers use the cached ``ctx.switch``).
        A switch nobody ever set is ``default`` (on)."""
        if isinstance(conn, _PSYCOPG_ASYNC):
            return self._aswitch(conn, name, default)
        if isinstance(conn, _PSYCOPG_SYNC):
            value = store.switch_get(conn, name)
            return default if value is None else value
        raise TypeError(f"switch needs a psycopg connection or cursor, got {type(conn).__name__}")

    async def _aswitch(self, conn: store.AsyncTarget, name: str, default: bool) -> bool:
        value = await store.aswitch_get(conn, name)
        return default if value is None else value


def _cancelled_status(rows: list[dict[str, Any]], task_id: int) -> Status:
    for row in rows:
        if int(row["task_id"]) == task_id:
            return Status(row["status_to"])
    raise TaskqError(f"task {task_id}: cancel returned no row")  # the function always returns it


_COLUMNS = {
    "task_types": "task_type",
    "queues": "queue",
    "biz_ids": "biz_id",
    "payloads": "payload",
    "priorities": "priority",
    "scheduled_ats": "scheduled_at",
    "delays": "delay",
    "max_retry_counts": "max_retry_count",
    "timeouts": "timeout_seconds",
    "trace_ids": "trace_id",
    "unique_keys": "unique_key",
    "ordering_keys": "ordering_key",
    "parent_ids": "parent_id",
    "concurrency_keys": "concurrency_key",
    "traceparents": "traceparent",
}


_PSYCOPG_SYNC = (psycopg.Connection, psycopg.Cursor)
_PSYCOPG_ASYNC = (psycopg.AsyncConnection, psycopg.AsyncCursor)


def _through(
    conn: object,
    run: Callable[[psycopg.Connection[Any]], _T],
    arun: Callable[[Any], Awaitable[_T]],
) -> _T | Coroutine[Any, Any, _T]:
    """Enqueue through a SQLAlchemy session or connection, a Django connection or an asyncpg
    connection: reduced to its driver connection, in the caller's transaction."""
    if integrations.mode_of(conn) == "sync":
        return run(integrations.sync_driver(conn))

    async def in_transaction() -> _T:
        return await arun(await integrations.async_driver(conn))

    return in_transaction()


def _is_plain(raw: object) -> bool:
    """An enqueue_many item with a task type, at most a payload besides, and nothing else."""
    return (
        isinstance(raw, Mapping)
        and not isinstance(raw, EnqueueItem)
        and "task_type" in raw
        and _PLAIN_ITEM.issuperset(raw.keys())
    )


def _columns(every: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per-item params as the parallel arrays insert_tasks unnests."""
    return {column: [p[key] for p in every] for column, key in _COLUMNS.items()}


def _duplicate(key: tuple[str, str], existing: int, on_duplicate: str) -> int:
    if on_duplicate == "raise":
        raise AlreadyEnqueued(
            f"a live {key[0]!r} task with unique key {key[1]!r} exists: task {existing}",
            [existing],
        )
    return existing


def _match(every: list[dict[str, Any]], inserted: list[dict[str, Any]]) -> list[int | None]:
    """Map inserted rows back to items. Rows come back in item order and only items with a
    unique key can be missing, so walk both lists together: an item takes the next row
    unless it is keyed and that row is not its own (or its key was already taken in this
    batch)."""
    ids: list[int | None] = []
    rows = iter(inserted)
    pending = next(rows, None)
    seen: set[tuple[str, str]] = set()
    for params in every:
        key = params["unique_key"]
        if key is None:
            assert pending is not None, "an unkeyed item was not inserted"
            ids.append(int(pending["id"]))
            pending = next(rows, None)
            continue
        pair = (params["task_type"], key)
        mine = (
            pending is not None
            and pair not in seen
            and (pending["task_type"], pending["unique_key"]) == pair
        )
        seen.add(pair)
        if mine:
            assert pending is not None
            ids.append(int(pending["id"]))
            pending = next(rows, None)
        else:
            ids.append(None)
    return ids


def _unmatched(
    every: list[dict[str, Any]], inserted: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    return sorted(
        {
            (p["task_type"], p["unique_key"])
            for p, task_id in zip(every, _match(every, inserted), strict=True)
            if task_id is None
        }
    )


def _ids_in_order(
    every: list[dict[str, Any]],
    inserted: list[dict[str, Any]],
    found: dict[tuple[str, str], int],
    on_duplicate: str,
) -> list[int]:
    ids: list[int] = []
    duplicates: list[int] = []
    for params, task_id in zip(every, _match(every, inserted), strict=True):
        if task_id is None:
            key = (params["task_type"], params["unique_key"])
            if key not in found:
                raise TaskqError(f"unique task {key[1]!r} was neither inserted nor found")
            task_id = found[key]
            duplicates.append(task_id)
        ids.append(task_id)
    if duplicates and on_duplicate == "raise":
        raise AlreadyEnqueued(
            f"{len(duplicates)} item(s) collide with live tasks: {sorted(set(duplicates))}",
            duplicates,
        )
    return ids


def _flow_limits(
    max_running: int | None,
    max_running_per_key: int | None,
    rate: str | None,
    burst: float | None,
    fair: bool,
) -> FlowLimits | None:
    for name, value in (("max_running", max_running), ("max_running_per_key", max_running_per_key)):
        bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        if value is not None and bad:
            raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
    if rate is not None:
        try:
            parse_rate(rate)
        except InvalidTask as exc:
            raise ConfigError(str(exc)) from None
    if burst is not None and (rate is None or burst < 1):
        raise ConfigError("burst needs a rate and must be >= 1")
    flow = FlowLimits(max_running, max_running_per_key, rate, burst, bool(fair))
    return flow if flow.any else None


def _env_payload_limit() -> int:
    """``TASKQ_MAX_PAYLOAD_BYTES`` (e.g. for ``taskq enqueue``), else the default (4 MiB)."""
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
