"""Test fixtures: a real PostgreSQL, a fresh database per test.

The server is ``TASKQ_TEST_DSN`` when set; otherwise an embedded PostgreSQL is started once per
session in a temporary folder (``taskq[embedded]``), so ``pytest`` works on a laptop with no
server at all. Each test gets its own database, cloned from a template that was built by
running the real migrations, so tests cannot see each other's rows, NOTIFYs or locks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import taskq
from taskq.db import migrate
from tests.support import WorkerHandle, WorkerProcess


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    explicit = os.environ.get("TASKQ_TEST_DSN")
    if explicit:
        yield explicit
        return
    from taskq.db import embedded

    folder = Path(tempfile.mkdtemp(prefix="taskq-test-pg-"))
    os.chmod(folder, 0o755)
    try:
        yield embedded.start_server(folder / "pgdata", delete_on_exit=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _admin(admin_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(admin_dsn, autocommit=True)


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[str]:
    """A database migrated to head with the real alembic revisions, cloned by every test."""
    name = f"taskq_tpl_{uuid.uuid4().hex[:10]}"
    with _admin(admin_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate.upgrade(make_conninfo(admin_dsn, dbname=name))
    yield name
    with _admin(admin_dsn) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextlib.contextmanager
def fresh_database(admin_dsn: str, template: str) -> Iterator[str]:
    name = f"taskq_t_{uuid.uuid4().hex[:12]}"
    with _admin(admin_dsn) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with _admin(admin_dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for this test only."""
    with fresh_database(admin_dsn, template_db) as value:
        yield value


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A fresh database with no taskq schema (migration tests)."""
    name = f"taskq_e_{uuid.uuid4().hex[:12]}"
    with _admin(admin_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with _admin(admin_dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(autouse=True)
def reap_worker_processes() -> Iterator[None]:
    """No worker subprocess outlives its test, whatever the test did."""
    yield
    while WorkerProcess.started:
        WorkerProcess.started.pop().kill()


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
async def worker_factory(dsn: str) -> AsyncIterator[Any]:
    """Start in-process workers; every one is stopped at teardown."""
    handles: list[WorkerHandle] = []

    async def start(app: taskq.App, **settings: Any) -> WorkerHandle:
        settings.setdefault("poll_interval_seconds", 0.5)
        settings.setdefault("shutdown_timeout_seconds", 5.0)
        handle = WorkerHandle(taskq.Worker(app, dsn=dsn, settings=taskq.WorkerSettings(**settings)))
        await handle.start()
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        await handle.stop()
