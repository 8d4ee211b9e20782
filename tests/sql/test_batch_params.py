"""The hot path's array parameters (taskq/db/store/arrays.py) travel as one array literal each
and must mean exactly what a list would."""

from __future__ import annotations

import math
import uuid
from typing import Any

import psycopg

from taskq.db.store.arrays import BigintArray, BoolArray, Float8Array, TextArray, UuidArray


def test_ids_and_tokens_arrive_as_the_lists_they_wrap(conn: psycopg.Connection[Any]) -> None:
    ids = [1, 2**62, 7, 7]
    tokens = [uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    for prepare in (False, True):
        got = conn.execute(
            "SELECT %(ids)s::bigint[], %(tokens)s::uuid[],"
            " %(ids)s::bigint[] = %(plain_ids)s::bigint[],"
            " %(tokens)s::uuid[] = %(plain_tokens)s::uuid[]",
            {
                "ids": BigintArray(ids),
                "tokens": UuidArray(tokens),
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
        {"ids": BigintArray(), "tokens": UuidArray()},
    ).fetchone()
    assert got == (0, 0, 0)


def test_text_arrays_keep_any_text(conn: psycopg.Connection[Any]) -> None:
    """Task types are producer-controlled: quotes, backslashes, commas, braces, blanks, the word
    NULL and non-ASCII text all arrive as written."""
    names = [
        'a"b',
        "c\\d",
        "line\nbreak\ttab",
        'Traceback (most recent call last):\n  File "x"',
        "e,f",
        "{g}",
        "h i",
        "NULL",
        "null",
        "",
        "ü",
        "\\",
        '"',
    ]
    for prepare in (False, True):
        got = conn.execute(
            "SELECT %(names)s::text[], %(names)s::text[] = %(plain)s::text[]",
            {"names": TextArray(names), "plain": names},
            prepare=prepare,
        ).fetchone()
        assert got == (names, True)


def test_float_and_flag_arrays_arrive_as_the_lists_they_wrap(
    conn: psycopg.Connection[Any],
) -> None:
    """A failure batch's retry seconds (None: use the formula), delays, jitters and breaker
    flags."""
    floats = [None, 0.0, 0.1, 1e-05, 2.5e20, -3.0, 1 / 3, math.inf]
    flags = [True, False, True]
    for prepare in (False, True):
        got = conn.execute(
            "SELECT %(floats)s::float8[], %(floats)s::float8[] = %(plain)s::float8[],"
            " %(flags)s::boolean[], %(nan)s::float8[]",
            {
                "floats": Float8Array(floats),
                "plain": floats,
                "flags": BoolArray(flags),
                "nan": Float8Array([math.nan]),
            },
            prepare=prepare,
        ).fetchone()
        assert got is not None
        assert got[:3] == (floats, True, flags)
        assert math.isnan(got[3][0])
