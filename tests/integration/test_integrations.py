"""Enqueue through what a service holds: SQLAlchemy (sync and async, psycopg and asyncpg
dialects), Django in ``atomic()``, a raw asyncpg connection. For each: a business transaction
that raises leaves neither its row nor its task; one that commits has its task started by a
worker woken by the commit's NOTIFY (the poll is 30 s, so only the wake-up can explain it)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import taskq
from tests.support import rows, wait_until

Business = Callable[[str, taskq.App, str, bool], Awaitable[int | None]]


class Boom(Exception):
    """The business failure that must take the task with it."""


def url(dsn: str, driver: str) -> str:
    parts = conninfo_to_dict(dsn)
    host = str(parts.get("host", "127.0.0.1"))
    port = parts.get("port", "5432")
    user = parts.get("user", "root")
    if host.startswith("/"):  # a socket directory (the embedded server): a query parameter
        return f"postgresql+{driver}://{user}@/{parts['dbname']}?host={host}&port={port}"
    return f"postgresql+{driver}://{user}@{host}:{port}/{parts['dbname']}"


def raw_asyncpg_dsn(dsn: str) -> str:
    return url(dsn, "x").replace("postgresql+x", "postgresql")


async def sa_sync_psycopg(dsn: str, app: taskq.App, order: str, fail: bool) -> int | None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    def business() -> int | None:
        engine = create_engine(url(dsn, "psycopg"))
        try:
            with Session(engine) as session:
                with session.begin():
                    session.execute(text("INSERT INTO orders (ref) VALUES (:r)"), {"r": order})
                    task_id: int = app.enqueue(session, "order.ship", {"order": order})
                    if fail:
                        raise Boom
                return task_id
        finally:
            engine.dispose()

    return await asyncio.to_thread(business)


async def _sa_async(dsn: str, driver: str, app: taskq.App, order: str, fail: bool) -> int | None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(url(dsn, driver))
    try:
        async with AsyncSession(engine) as session:
            async with session.begin():
                # The enqueue is the session's first statement: it must begin the transaction
                # the session later commits or rolls back.
                task_id: int = await app.enqueue(session, "order.ship", {"order": order})
                await session.execute(text("INSERT INTO orders (ref) VALUES (:r)"), {"r": order})
                if fail:
                    raise Boom
            return task_id
    finally:
        await engine.dispose()


async def sa_async_psycopg(dsn: str, app: taskq.App, order: str, fail: bool) -> int | None:
    return await _sa_async(dsn, "psycopg", app, order, fail)


async def sa_async_asyncpg(dsn: str, app: taskq.App, order: str, fail: bool) -> int | None:
    return await _sa_async(dsn, "asyncpg", app, order, fail)


async def raw_asyncpg(dsn: str, app: taskq.App, order: str, fail: bool) -> int | None:
    import asyncpg

    conn = await asyncpg.connect(raw_asyncpg_dsn(dsn))
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO orders (ref) VALUES ($1)", order)
            task_id: int = await app.enqueue(conn, "order.ship", {"order": order})
            if fail:
                raise Boom
        return task_id
    finally:
        await conn.close()


_django_lock = threading.Lock()


def django_alias(dsn: str) -> str:
    """A Django database alias for this test's database (settings are configured once per
    process; each test adds its own alias)."""
    import django
    from django.conf import settings
    from django.db import connections

    with _django_lock:
        if not settings.configured:
            settings.configure(DATABASES={}, INSTALLED_APPS=[], USE_TZ=True)
            django.setup()
        parts = conninfo_to_dict(dsn)
        alias = str(parts["dbname"])
        if alias not in connections.settings:
            conf = {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts["dbname"],
                "USER": parts.get("user", "root"),
                "HOST": parts.get("host", "127.0.0.1"),
                "PORT": parts.get("port", "5432"),
            }
            filled = connections.configure_settings({"default": conf})["default"]
            connections.settings[alias] = filled
    return alias


async def django_atomic(dsn: str, app: taskq.App, order: str, fail: bool) -> int | None:
    alias = django_alias(dsn)

    def business() -> int | None:
        from django.db import connections, transaction

        from taskq.integrations.django import enqueue

        try:
            with transaction.atomic(using=alias):
                with connections[alias].cursor() as cur:
                    cur.execute("INSERT INTO orders (ref) VALUES (%s)", [order])
                task_id = enqueue(app, "order.ship", {"order": order}, using=alias)
                if fail:
                    raise Boom
            return task_id
        finally:
            connections[alias].close()

    return await asyncio.to_thread(business)


CASES: dict[str, Business] = {
    "sqlalchemy-session-psycopg": sa_sync_psycopg,
    "sqlalchemy-asyncsession-psycopg": sa_async_psycopg,
    "sqlalchemy-asyncsession-asyncpg": sa_async_asyncpg,
    "asyncpg": raw_asyncpg,
    "django-atomic": django_atomic,
}


def shipping_app(dsn: str, started: dict[str, float]) -> taskq.App:
    app = taskq.App(dsn=dsn)

    @app.task("order.ship")
    async def ship(ctx: taskq.TaskContext, payload: Any) -> None:
        started[payload["order"]] = time.monotonic()

    return app


@pytest.fixture
def orders(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE orders (ref text PRIMARY KEY)")
    return dsn


@pytest.mark.parametrize("case", list(CASES))
async def test_rollback_leaves_neither_row_nor_task(orders: str, case: str) -> None:
    app = shipping_app(orders, {})
    with pytest.raises(Boom):
        await CASES[case](orders, app, "o-1", True)
    assert rows(orders, "SELECT * FROM orders") == []
    assert rows(orders, "SELECT * FROM taskq.tasks") == []


@pytest.mark.parametrize("case", list(CASES))
async def test_commit_wakes_a_worker(orders: str, case: str, worker_factory: Any) -> None:
    started: dict[str, float] = {}
    app = shipping_app(orders, started)
    await worker_factory(app, poll_interval_seconds=30)
    task_id = await CASES[case](orders, app, "o-2", False)
    committed = time.monotonic()
    assert rows(orders, "SELECT ref FROM orders") == [{"ref": "o-2"}]
    await wait_until(lambda: "o-2" in started, timeout=5, what="the handler to start")
    found = rows(orders, "SELECT id, payload FROM taskq.tasks")
    assert found == [{"id": task_id, "payload": {"order": "o-2"}}]
    # Informational: the wake-up latency from the commit to the handler (NOTIFY, not poll).
    print(f"{case}: handler started {1000 * (started['o-2'] - committed):.1f} ms after commit")


async def test_enqueue_many_through_an_async_session(orders: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    app = shipping_app(orders, {})
    engine = create_async_engine(url(orders, "asyncpg"))
    try:
        async with AsyncSession(engine) as session, session.begin():
            ids = await app.enqueue_many(
                session,
                [{"task_type": "order.ship", "payload": {"order": str(i)}} for i in range(3)]
                + [{"task_type": "order.ship", "biz_id": "k", "unique": True}] * 2,
            )
    finally:
        await engine.dispose()
    assert len(ids) == 5 and ids[3] == ids[4]
    assert [r["id"] for r in rows(orders, "SELECT id FROM taskq.tasks ORDER BY id")] == ids[:4]


def test_unknown_connection_type_is_refused() -> None:
    with pytest.raises(TypeError, match="SQLAlchemy session"):
        taskq.App().enqueue(object(), "order.ship")
