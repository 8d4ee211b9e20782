"""`taskq migrate` without privileges says so in one line (it printed a 60-line traceback)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support import taskq_cli


@pytest.fixture
def unprivileged(empty_dsn: str) -> Iterator[str]:
    role = f"taskq_nopriv_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    try:
        yield make_conninfo(empty_dsn, user=role, password=None)
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_migrate_without_privileges_is_one_line(unprivileged: str) -> None:
    assert conninfo_to_dict(unprivileged)["user"].startswith("taskq_nopriv_")
    result = taskq_cli("migrate", "--dsn", unprivileged)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskq: error: cannot migrate:"), lines
    assert "permission denied" in lines[0] and "Traceback" not in result.stderr
