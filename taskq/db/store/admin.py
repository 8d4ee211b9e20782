"""LISTEN, whole scripts and database creation: statements that are not named queries."""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg
from psycopg import sql


async def listen(conn: psycopg.AsyncConnection[Any], channel: str) -> None:
    """LISTEN on ``channel``; the name is quoted as an identifier, never interpolated."""
    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


def listen_sync(conn: psycopg.Connection[Any], channel: str) -> None:
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))


def recreate_database(conn: psycopg.Connection[Any], name: str) -> None:
    """DROP (forcing out sessions) and CREATE a database; ``conn`` must be autocommit."""
    ident = sql.Identifier(name)
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))


def run_script(conn: psycopg.Connection[Any], script: LiteralString) -> None:
    """Run a multi-statement script of our own (``sql/roles.sql``) in one transaction."""
    with conn.transaction():
        conn.execute(script)
