"""What a handler gets besides its payload."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, Unpack

import psycopg

from taskq.errors import Cancelled, LeaseLost, TaskqError
from taskq.model import JSON, ClaimedTask

if TYPE_CHECKING:
    from taskq.app import App, EnqueueOptions
    from taskq.progress import ProgressReporter


class Runtime(Protocol):
    """What the worker lends a context: the app and its connections."""

    app: App

    def sync_connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]: ...

    def async_connection(
        self,
    ) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...

    def switch_value(self, name: str) -> bool | None:
        """A business switch from the worker's cache (None: never set)."""
        ...


_CANCELLED_LOCK = threading.Lock()


class TaskContext:
    """One attempt of one task, as seen by its handler.

    ``attempt`` is the task's retry_count when this run was claimed: 0 on the first run, 1 on
    the first retry, and so on. ``effective_id`` is the attempt's token; pass it (or
    ``task_id`` + ``attempt``) downstream as an idempotency key for effects outside PostgreSQL.

    Blocking helpers (``checkpoint``, ``enqueue``, ``connection``) are for sync handlers, which
    run in threads; async handlers use the ``a``-prefixed twins.
    """

    __slots__ = (
        "_abort",
        "_aconn",
        "_cancelled",
        "_conn",
        "_context",
        "_make_reporter",
        "_reporter",
        "_runtime",
        "_task",
        "worker_id",
    )

    def __init__(
        self,
        task: ClaimedTask,
        *,
        worker_id: str,
        reporter: Callable[[ClaimedTask], ProgressReporter],
        runtime: Runtime | None = None,
    ) -> None:
        self._task = task
        self._make_reporter = reporter
        self._reporter: ProgressReporter | None = None
        self._runtime = runtime
        self._context: JSON = task.context  # None: no checkpoint (``context`` gives {})
        self._conn: psycopg.Connection[Any] | None = None
        self._aconn: psycopg.AsyncConnection[Any] | None = None
        self.worker_id = worker_id
        self._cancelled: threading.Event | None = None  # made on first use (most never are)
        self._abort: Callable[[], None] | None = None

    @property
    def cancelled(self) -> threading.Event:
        """Set once an operator asked this attempt to abort (``taskq cancel``). Sync handlers
        check it (or call :meth:`raise_if_cancelled`) between steps; async handlers are
        cancelled outright."""
        event = self._cancelled
        if event is None:
            with _CANCELLED_LOCK:  # the handler's thread and the loop may ask at once
                event = self._cancelled
                if event is None:
                    event = self._cancelled = threading.Event()
        return event

    @property
    def _abort_requested(self) -> bool:
        """``cancelled.is_set()`` without making the event."""
        return self._cancelled is not None and self._cancelled.is_set()

    # --- who am I --------------------------------------------------------------------------

    @property
    def task_id(self) -> int:
        return self._task.id

    @property
    def task_type(self) -> str:
        return self._task.task_type

    @property
    def queue(self) -> str:
        return self._task.queue

    @property
    def biz_id(self) -> str | None:
        return self._task.biz_id

    @property
    def attempt(self) -> int:
        return self._task.retry_count

    @property
    def max_retry_count(self) -> int:
        return self._task.max_retry_count

    @property
    def trace_id(self) -> str | None:
        return self._task.trace_id

    @property
    def parent_id(self) -> int | None:
        return self._task.parent_id

    @property
    def payload(self) -> JSON:
        return self._task.payload

    @property
    def effective_id(self) -> uuid.UUID:
        return self._task.effective_id

    @property
    def app(self) -> App:
        """The App this worker runs (e.g. to look at ``app.tasks``)."""
        return self._need_runtime().app

    @property
    def lease_lost(self) -> bool:
        """True once a write of this attempt matched no row: the task was taken away."""
        return self._reporter is not None and self._reporter.lease_lost

    # --- cancel and switches ---------------------------------------------------------------

    def raise_if_cancelled(self) -> None:
        """Raise :class:`taskq.Cancelled` if an abort was requested; call it between steps."""
        if self.cancelled.is_set():
            raise Cancelled(f"task {self.task_id}: abort requested")

    def switch(self, name: str, default: bool = True) -> bool:
        """A business switch ("may SMS be sent at all?"), from the worker's cache: no query per
        call; NOTIFY refreshes it within a second of ``taskq switch set``. A switch nobody ever
        set is ``default`` (on)."""
        value = self._need_runtime().switch_value(name)
        return default if value is None else value

    def _request_abort(self) -> None:
        """The worker heard an abort request for this attempt (any thread)."""
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        if self._abort is not None:
            self._abort()

    # --- progress --------------------------------------------------------------------------

    def progress(self, percent: float, message: str | None = None) -> None:
        """Report progress (0-100). Never blocks: the latest value is stored on the row and
        published on the ``taskq_progress`` channel at most a few times per second."""
        pct = max(0.0, min(100.0, float(percent)))
        value = {"percent": pct, "message": message}
        if self._reporter is None:
            self._reporter = self._make_reporter(self._task)
        self._reporter.submit(json.dumps(value, separators=(",", ":")))

    # --- stage checkpoints -----------------------------------------------------------------

    @property
    def context(self) -> dict[str, Any]:
        """The saved checkpoint: ``{"stage": <last completed stage>, "data": {...}}`` or {}."""
        return dict(self._context) if isinstance(self._context, dict) else {}

    @property
    def stage(self) -> str | None:
        """The last completed stage (from an earlier attempt or this one), or None."""
        return self.context.get("stage")

    @property
    def data(self) -> dict[str, Any]:
        """Data saved with the checkpoints so far (later stages' keys win)."""
        saved = self.context.get("data")
        return dict(saved) if isinstance(saved, dict) else {}

    def checkpoint(self, stage: str, **data: Any) -> None:
        """Record that ``stage`` is done (sync handlers). Persisted before this returns, in
        its own statement (it survives a rollback of an idempotent transaction); a retry
        starts with it. Raises :class:`taskq.LeaseLost` if the attempt was taken away."""
        _not_on_loop("checkpoint", "acheckpoint")
        from taskq.db import store

        with self._need_runtime().sync_connection() as conn:
            saved = store.save_checkpoint(conn, self._task, stage, _json(data))
        self._saved(saved, stage)

    async def acheckpoint(self, stage: str, **data: Any) -> None:
        """``checkpoint`` for async handlers."""
        from taskq.db import store

        async with self._need_runtime().async_connection() as conn:
            saved = await store.asave_checkpoint(conn, self._task, stage, _json(data))
        self._saved(saved, stage)

    def _saved(self, saved: JSON, stage: str) -> None:
        if saved is None:
            raise LeaseLost(f"task {self.task_id}: attempt taken away before stage {stage!r}")
        self._context = saved

    # --- the database ----------------------------------------------------------------------

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """Idempotent sync handlers: the transaction that also records the business key and
        the SUCCESS; write your business changes here."""
        if self._conn is None:
            raise TaskqError(
                "ctx.conn exists only in idempotent sync handlers "
                "(@app.task(..., idempotent=True)); use ctx.connection() otherwise"
            )
        return self._conn

    @property
    def aconn(self) -> psycopg.AsyncConnection[Any]:
        """Idempotent async handlers: the transaction (see :attr:`conn`)."""
        if self._aconn is None:
            raise TaskqError(
                "ctx.aconn exists only in idempotent async handlers "
                "(@app.task(..., idempotent=True)); use ctx.aconnection() otherwise"
            )
        return self._aconn

    def connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled autocommit connection to the taskq database (sync handlers)."""
        _not_on_loop("connection", "aconnection")
        return self._need_runtime().sync_connection()

    def aconnection(self) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection to the taskq database (async handlers)."""
        return self._need_runtime().async_connection()

    # --- child tasks -----------------------------------------------------------------------

    def _child_options(self, options: EnqueueOptions) -> EnqueueOptions:
        child: EnqueueOptions = {**options}
        child.setdefault("trace_id", self.trace_id)
        child["parent_id"] = self.task_id
        return child

    def enqueue(
        self, task_type: str, payload: JSON = None, **options: Unpack[EnqueueOptions]
    ) -> int:
        """Enqueue a child task (sync handlers): ``parent_id`` is this task, the trace_id is
        inherited. Inside an idempotent handler it joins the handler's transaction."""
        _not_on_loop("enqueue", "aenqueue")
        app = self._need_runtime().app
        child = self._child_options(options)
        task_id: int
        if self._conn is not None:
            task_id = app.enqueue(self._conn, task_type, payload, **child)
            return task_id
        with self._need_runtime().sync_connection() as conn:
            task_id = app.enqueue(conn, task_type, payload, **child)
            return task_id

    async def aenqueue(
        self, task_type: str, payload: JSON = None, **options: Unpack[EnqueueOptions]
    ) -> int:
        """``enqueue`` for async handlers."""
        app = self._need_runtime().app
        child = self._child_options(options)
        task_id: int
        if self._aconn is not None:
            task_id = await app.enqueue(self._aconn, task_type, payload, **child)
            return task_id
        async with self._need_runtime().async_connection() as conn:
            task_id = await app.enqueue(conn, task_type, payload, **child)
            return task_id

    # --- plumbing for the executor ---------------------------------------------------------

    def _need_runtime(self) -> Runtime:
        if self._runtime is None:
            raise TaskqError("this TaskContext is not attached to a worker")
        return self._runtime

    @contextlib.contextmanager
    def _attached(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        self._conn = conn
        try:
            yield
        finally:
            self._conn = None

    @contextlib.asynccontextmanager
    async def _aattached(self, conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
        self._aconn = conn
        try:
            yield
        finally:
            self._aconn = None


def _json(data: dict[str, Any]) -> str:
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TaskqError(f"checkpoint data is not JSON-serialisable: {exc}") from None


def _not_on_loop(name: str, async_name: str) -> None:
    """Blocking helpers on the event loop would stall every async task of the worker."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise TaskqError(f"ctx.{name}() blocks; in an async handler use 'await ctx.{async_name}()'")
