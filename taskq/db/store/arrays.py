"""Array parameters of the hot statements, each dumped as one array literal.

psycopg dumps a plain Python list element by element, in Python: a dumper call per element, a
quoting regex per element, and a look for the element type per list. For the ids and tokens
of a 100-task completion that was ~0.6 ms, and the claim's three little lists of handler
settings cost as much again per claim: together a sixth of a drain worker's CPU. Wrapped in
these, a list is joined into one literal (``{1,2,3}``), which the statement casts as before
(``%(ids)s::bigint[]``). No element may be None, except in a ``Float8Array``.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg.adapt import Dumper

__all__ = ["BigintArray", "BoolArray", "Float8Array", "TextArray", "UuidArray"]


class BigintArray(list[int]):
    """Integers (ids, counts, seconds) for a ``bigint[]`` or ``integer[]`` parameter."""


class UuidArray(list[uuid.UUID]):
    """UUIDs (attempt tokens) for a ``uuid[]`` parameter."""


class TextArray(list[str]):
    """Strings (task types) for a ``text[]`` parameter; any text, quoted as PostgreSQL's array
    input reads it."""


class Float8Array(list[float | None]):
    """Floats (seconds) for a ``float8[]`` parameter; None is NULL."""


class BoolArray(list[bool]):
    """Flags for a ``boolean[]`` parameter."""


class _BigintArrayDumper(Dumper):
    oid = psycopg.postgres.types["int8"].array_oid

    def dump(self, obj: BigintArray) -> bytes:
        return ("{" + ",".join(map(str, map(int, obj))) + "}").encode()


class _UuidArrayDumper(Dumper):
    oid = psycopg.postgres.types["uuid"].array_oid

    def dump(self, obj: UuidArray) -> bytes:
        return ("{" + ",".join([token.hex for token in obj]) + "}").encode()


class _Float8ArrayDumper(Dumper):
    oid = psycopg.postgres.types["float8"].array_oid

    def dump(self, obj: Float8Array) -> bytes:
        # repr() is the shortest exact text; float8 input reads it, inf and nan included.
        return (
            "{" + ",".join(["NULL" if v is None else repr(float(v)) for v in obj]) + "}"
        ).encode()


class _BoolArrayDumper(Dumper):
    oid = psycopg.postgres.types["bool"].array_oid

    def dump(self, obj: BoolArray) -> bytes:
        return ("{" + ",".join(["t" if v else "f" for v in obj]) + "}").encode()


class _TextArrayDumper(Dumper):
    oid = psycopg.postgres.types["text"].array_oid

    def dump(self, obj: TextArray) -> bytes:
        # Every element double-quoted, with backslash and double quote escaped: commas, braces,
        # blanks and the word NULL then stay text.
        quoted = ['"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"' for s in obj]
        encoding = self.connection.info.encoding if self.connection is not None else "utf-8"
        return ("{" + ",".join(quoted) + "}").encode(encoding)


# Global: every connection made after this import knows them (the store is imported first).
psycopg.adapters.register_dumper(BigintArray, _BigintArrayDumper)
psycopg.adapters.register_dumper(UuidArray, _UuidArrayDumper)
psycopg.adapters.register_dumper(TextArray, _TextArrayDumper)
psycopg.adapters.register_dumper(Float8Array, _Float8ArrayDumper)
psycopg.adapters.register_dumper(BoolArray, _BoolArrayDumper)
