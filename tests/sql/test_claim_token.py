"""A claim draws its tokens' randomness once (sql/ddl/0030_claim_token_per_claim.sql): each
token is that draw's first 74 random bits, in a version-4 UUID's layout, and the row's id. What
the token is for must still hold: new at every claim, and never shared by two attempts."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from taskq.db.sqlfiles import query
from tests import factories

PARAMS: dict[str, Any] = {
    "queue": "default",
    "task_types": ["t"],
    "max_retry_counts": [5],
    "timeouts": [60],
    "worker_id": "w",
    "retries_only": False,
    "probe": False,
    "isolated": False,
}


def claim(conn: psycopg.Connection[Any], limit: int) -> dict[int, uuid.UUID]:
    rows = conn.execute(query("claim_batch"), {**PARAMS, "limit": limit}).fetchall()
    return {r[0]: r[9] for r in rows}


def test_each_row_of_a_claim_gets_its_own_version_4_token(conn: psycopg.Connection[Any]) -> None:
    ids = [factories.task(conn, age=60) for _ in range(20)]
    tokens = claim(conn, 20)
    assert sorted(tokens) == sorted(ids)
    assert len(set(tokens.values())) == 20
    for task_id, token in tokens.items():
        assert token.version == 4 and token.variant == uuid.RFC_4122
        assert token.int & (2**48 - 1) == task_id  # the row's id: no two rows share one
    assert len({str(t)[:24] for t in tokens.values()}) == 1  # one draw per claim
    stored = dict(conn.execute("SELECT id, effective_id FROM taskq.tasks").fetchall())
    assert stored == tokens


def test_a_task_claimed_again_gets_a_new_token(conn: psycopg.Connection[Any]) -> None:
    task_id = factories.task(conn, age=60)
    seen = []
    for _ in range(5):
        [(claimed, token)] = claim(conn, 1).items()
        assert claimed == task_id
        seen.append(token)
        conn.execute(
            "UPDATE taskq.tasks SET status = 'PENDING', effective_id = NULL, worker_id = NULL,"
            " started_at = NULL WHERE id = %s",
            (task_id,),
        )
    assert len(set(seen)) == 5  # a stale attempt's token never matches the next attempt's
    assert len({str(t)[:24] for t in seen}) == 5
