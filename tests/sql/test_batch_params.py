"""The hot path's batch parameters: ids and tokens travel as one array literal each (``Ids``,
``Tokens``), and must mean exactly what a list would."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from taskq.db.store._base import Ids, Tokens


def test_ids_and_tokens_arrive_as_the_lists_they_wrap(conn: psycopg.Connection[Any]) -> None:
    ids = [1, 2**62, 7, 7]
    tokens = [uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    for prepare in (False, True):
        got = conn.execute(
            "SELECT %(ids)s::bigint[], %(tokens)s::uuid[],"
            " %(ids)s::bigint[] = %(plain_ids)s::bigint[],"
            " %(tokens)s::uuid[] = %(plain_tokens)s::uuid[]",
            {
                "ids": Ids(ids),
                "tokens": Tokens(tokens),
                "plain_ids": ids,
                "plain_tokens": tokens,
            },
            prepare=prepare,
        ).fetchone()
        assert got == (ids, tokens, True, True)


def test_empty_batches_are_empty_arrays(conn: psycopg.Connection[Any]) -> None:
    got = conn.execute(
        "SELECT cardinality(%(ids)s::bigint[]), cardinality(%(tokens)s::uuid[]),"
        " (SELECT count(*) FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]))",
        {"ids": Ids(), "tokens": Tokens()},
    ).fetchone()
    assert got == (0, 0, 0)
