"""The connections a worker lends its handlers: the async pool (shared with the worker's own
statements) for async handlers, and a sync pool, opened on first use, for sync handlers running
in threads (checkpoints, child tasks, idempotent transactions)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from taskq.app import App
from taskq.db.connection import application_name, check_connection


class WorkerRuntime:
    def __init__(
        self,
        app: App,
        pool: AsyncConnectionPool[Any],
        *,
        dsn: str,
        sync_max_size: int,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        self._pool = pool
        self._dsn = dsn
        self._connect_kwargs = dict(connect_kwargs or {})
        self._sync_max = max(1, sync_max_size)
        self._sync_pool: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()
        self.switches: Callable[[], Mapping[str, bool]] = dict
        """The business switches as last read (the worker points this at its control cache)."""

    def switch_value(self, name: str) -> bool | None:
        return self.switches().get(name)

    def async_connection(
        self,
    ) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        return self._pool.connection()

    def sync_connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        with self._lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self._dsn,
                    min_size=0,
                    max_size=self._sync_max,
                    kwargs={
                        "autocommit": True,
                        "application_name": application_name("handler"),
                        **self._connect_kwargs,
                    },
                    name="taskq-handlers",
                    # A handler must never get a connection the server closed while it sat in
                    # the pool (it would fail, and be charged, for the database's restart).
                    check=check_connection,
                    open=True,
                )
            pool = self._sync_pool
        return pool.connection()

    def close(self) -> None:
        with self._lock:
            pool, self._sync_pool = self._sync_pool, None
        if pool is not None:
            pool.close(timeout=5)
