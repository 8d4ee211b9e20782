"""The SQL files, loaded by name.

Every runtime statement is a ``-- name: <query>`` block in ``sql/queries/*.sql``; every schema
change is a numbered, never-edited file in ``sql/ddl/``. This module is the one place that knows
where those files live: inside the installed wheel (``taskq/_sql``) or, for a checkout or an
editable install, the repository's ``sql/`` folder.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import LiteralString, cast

_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


def _package_dir() -> Path:
    """The ``taskq`` package folder (this file lives in ``taskq/db/``)."""
    return Path(__file__).resolve().parent.parent


def sql_root() -> Path:
    """The folder holding ``ddl/`` and ``queries/``."""
    packaged = _package_dir() / "_sql"
    if packaged.is_dir():
        return packaged
    return _package_dir().parent / "sql"


def migrations_root() -> Path:
    """The alembic script folder (``env.py`` and ``versions/``)."""
    packaged = _package_dir() / "_migrations"
    if packaged.is_dir():
        return packaged
    return _package_dir().parent / "migrations"


@functools.cache
def _queries() -> dict[str, LiteralString]:
    found: dict[str, LiteralString] = {}
    for path in sorted((sql_root() / "queries").glob("*.sql")):
        parts = _NAME.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"duplicate query name {name!r} in {path.name}")
            # Our own files, shipped with the package: trusted exactly like code.
            found[name] = cast(LiteralString, body.strip().rstrip(";"))
    return found


def query(name: str) -> LiteralString:
    """The statement called ``name`` in ``sql/queries``."""
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r}") from None


def query_names() -> frozenset[str]:
    return frozenset(_queries())


def ddl(name: str) -> str:
    """The DDL file ``sql/ddl/<name>.sql`` (used by the alembic revisions)."""
    return (sql_root() / "ddl" / f"{name}.sql").read_text(encoding="utf-8")


def roles() -> LiteralString:
    """``sql/roles.sql``: the least-privilege roles and their grants (``taskq migrate --roles``).

    Several statements, DO blocks included, without transaction control: the caller runs it in
    one transaction so a half-applied set of grants is never visible.
    """
    # Our own file, shipped with the package: trusted exactly like code. (mypy treats
    # LiteralString as str, so no cast is needed to say so.)
    text: LiteralString = (sql_root() / "roles.sql").read_text(encoding="utf-8")
    return text


_NAMED = re.compile(r"%\((\w+)\)s|%%")


@functools.cache
def positional(name: str) -> tuple[str, tuple[str, ...]]:
    """The statement called ``name`` with ``$1, $2, ...`` placeholders for drivers that take
    positional parameters (asyncpg), and the parameter names in that order. A name used twice
    keeps one number."""
    body = "\n".join(
        line for line in query(name).splitlines() if not line.lstrip().startswith("--")
    )
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param is None:
            return "%"
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    return _NAMED.sub(number, body), tuple(order)
