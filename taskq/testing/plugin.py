"""The taskq pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

- ``taskq_dsn``: a database of this test's own, migrated to taskq's head, cloned from a
  template that is migrated once per session (fast: a clone is a file copy).
- ``taskq_admin_dsn`` (session): the server the clones live on: ``--taskq-dsn``, else
  ``$TASKQ_TEST_DSN``, else ``$TASKQ_DSN``, else the embedded server (``taskq[embedded]``).

Each test's database is dropped at the end of the test. Under pytest-xdist every worker
process clones its own.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--taskq-dsn",
        default=None,
        help="PostgreSQL server for the taskq_dsn fixture's databases (default: "
        "$TASKQ_TEST_DSN, $TASKQ_DSN, else the embedded server)",
    )


@pytest.fixture(scope="session")
def taskq_admin_dsn(request: pytest.FixtureRequest) -> str:
    from taskq.db.dsn import resolve_dsn

    explicit = request.config.getoption("--taskq-dsn") or os.environ.get("TASKQ_TEST_DSN")
    return resolve_dsn(explicit)


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def _drop(admin_dsn: str, name: str) -> None:
    with _admin(admin_dsn) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def taskq_template(taskq_admin_dsn: str) -> Iterator[str]:
    from taskq.db import migrate

    name = f"taskq_tpl_{uuid.uuid4().hex[:10]}"
    with _admin(taskq_admin_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        migrate.upgrade(make_conninfo(taskq_admin_dsn, dbname=name))
        yield name
    finally:
        _drop(taskq_admin_dsn, name)


@pytest.fixture
def taskq_dsn(taskq_admin_dsn: str, taskq_template: str) -> Iterator[str]:
    """A migrated database for this test only; its DSN."""
    name = f"taskq_t_{uuid.uuid4().hex[:12]}"
    with _admin(taskq_admin_dsn) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(taskq_template)
            )
        )
    try:
        yield make_conninfo(taskq_admin_dsn, dbname=name)
    finally:
        with contextlib.suppress(psycopg.Error):
            _drop(taskq_admin_dsn, name)
