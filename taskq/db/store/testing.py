"""The statements of ``sql/queries/testing.sql`` (``taskq.testing``: drain and assertions)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from taskq.db.store._base import Row, _all


def drain_clock(conn: psycopg.Connection[Any]) -> dt.datetime:
    now: dt.datetime = _all(conn, "drain_clock")[0]["now"]
    return now


def drain_make_retries_due(conn: psycopg.Connection[Any], task_types: Sequence[str]) -> None:
    conn.execute(query("drain_make_retries_due"), {"task_types": list(task_types)})


def drain_pending(
    conn: psycopg.Connection[Any],
    task_types: Sequence[str],
    ids: Sequence[int] | None,
    *,
    retries: bool,
) -> int:
    params = {
        "task_types": list(task_types),
        "ids": None if ids is None else list(ids),
        "retries": retries,
    }
    return int(_all(conn, "drain_pending", params)[0]["n"])


def drain_due_ids(conn: psycopg.Connection[Any], task_types: Sequence[str]) -> list[int]:
    return [int(r["id"]) for r in _all(conn, "drain_due_ids", {"task_types": list(task_types)})]


def drain_outcomes(
    conn: psycopg.Connection[Any], task_types: Sequence[str], since: dt.datetime
) -> list[Row]:
    return _all(conn, "drain_outcomes", {"task_types": list(task_types), "since": since})


def enqueued_of_type(conn: psycopg.Connection[Any], task_type: str) -> list[Row]:
    return _all(conn, "enqueued_of_type", {"task_type": task_type})
