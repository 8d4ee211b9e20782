"""The statements of ``sql/queries/switches.sql``."""

from __future__ import annotations

from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import AsyncTarget, Row, SyncTarget, _all, _async_cursor, _sync_cursor


def switch_set(
    conn: psycopg.Connection[Any], *, name: str, enabled: bool, note: str | None, by: str | None
) -> bool:
    """True when the switch changed (audited and NOTIFYed by the database function)."""
    with _sync_cursor(conn) as cur:
        cur.execute(query("switch_set"), {"name": name, "enabled": enabled, "note": note, "by": by})
        row = cur.fetchone()
        return bool(row and row["changed"])


def switch_list(conn: psycopg.Connection[Any]) -> list[Row]:
    return _all(conn, "switch_list")


def switch_get(target: SyncTarget, name: str) -> bool | None:
    """The switch's value, or None when it was never set."""
    with _sync_cursor(target) as cur:
        cur.execute(query("switch_get"), {"name": name})
        row = cur.fetchone()
        return None if row is None else bool(row["enabled"])


async def aswitch_get(target: AsyncTarget, name: str) -> bool | None:
    async with _async_cursor(target) as cur:
        await cur.execute(query("switch_get"), {"name": name})
        row = await cur.fetchone()
        return None if row is None else bool(row["enabled"])
