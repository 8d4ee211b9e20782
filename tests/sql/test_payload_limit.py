"""The database's own payload limit holds for every writer, not just the Python API."""

from __future__ import annotations

import psycopg
import pytest

BIG = (
    "INSERT INTO taskq.tasks (task_type, payload) "
    "SELECT 't', jsonb_build_object('b', repeat('x', %s))"
)


def test_sql_insert_over_the_limit_is_refused_and_the_limit_is_configurable(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BIG, (1_000_000,))  # under the 16 MiB default
        with pytest.raises(psycopg.errors.CheckViolation, match="max_payload_bytes"):
            conn.execute(BIG, (17 * 1024 * 1024,))
        conn.execute("UPDATE taskq.settings SET max_payload_bytes = 100000")
        with pytest.raises(psycopg.errors.CheckViolation) as caught:
            conn.execute(BIG, (200_000,))
        assert caught.value.diag.constraint_name == "tasks_payload_size_check"
        conn.execute(BIG, (60_000,))  # under the floor: never even looked up
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE taskq.settings SET max_payload_bytes = 1000")
        count = conn.execute("SELECT count(*) FROM taskq.tasks").fetchone()
    assert count == (2,)


def test_a_lower_limit_never_blocks_rows_already_queued(dsn: str) -> None:
    """Insert-only: a row written under the old limit is still claimed and finished."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(BIG, (500_000,))
        conn.execute("UPDATE taskq.settings SET max_payload_bytes = 100000")
        updated = conn.execute(
            "UPDATE taskq.tasks SET status = 'PROCESSING', started_at = now() RETURNING id"
        ).fetchall()
    assert len(updated) == 1
