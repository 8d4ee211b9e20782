"""The statements of ``sql/queries/reap.sql``: the forgetting of dead workers. The rescue
itself (``reap_attempts``) is in ``finish.py``, with every other statement that moves a row out
of PROCESSING."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import _async_cursor


async def delete_dead_workers(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    async with _async_cursor(conn) as cur:
        await cur.execute(query("delete_dead_workers"))
        return [str(r["id"]) for r in await cur.fetchall()]
