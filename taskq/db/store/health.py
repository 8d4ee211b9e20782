"""The statements of ``sql/queries/health.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import (
    Row,
    _sync_cursor,
)


def worker_health(
    conn: psycopg.Connection[Any], *, worker_id: str | None, host: str | None, pid: int | None
) -> Row | None:
    """The freshest worker row matching the given filters (None: unfiltered)."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("worker_health"), {"id": worker_id, "host": host, "pid": pid})
        return cur.fetchone()
