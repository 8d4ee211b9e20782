"""Where connections come from, and the translation of connection failures.

Every connection taskq opens is tagged with an ``application_name`` (``taskq-<role>-<pid>``),
so an operator (or a fault test) can find it in ``pg_stat_activity``.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from taskq.errors import DatabaseUnavailable, SchemaMissing, TaskqError

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

ConnectionError_ = (psycopg.OperationalError, psycopg.InterfaceError)
"""What a lost or refused connection raises (server restart, terminated backend, network)."""


def for_writes(dsn: str) -> str:
    """The DSN with ``target_session_attrs=read-write`` when it names several hosts and does
    not say which kind of server it wants.

    A multi-host DSN (``host=h1,h2`` or ``postgresql://h1,h2/db``) lists the primary and its
    standbys; libpq takes the first host that answers, which after a failover may be the demoted
    old primary, back as a read-only standby. taskq writes on every connection it keeps, so it
    asks libpq for the writable one. A DSN that already sets ``target_session_attrs`` (or names
    one host, which may well be a standby an operator reads from) is left alone.
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn  # let connect() report the malformed DSN
    if "," not in str(params.get("host") or "") or "target_session_attrs" in params:
        return dsn
    return make_conninfo(dsn, target_session_attrs="read-write")


def application_name(role: str) -> str:
    return f"taskq-{role}-{os.getpid()}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def missing_schema(exc: BaseException) -> bool:
    """Whether ``exc`` says the taskq schema (or one of its objects) does not exist."""
    missing = (
        psycopg.errors.UndefinedTable,
        psycopg.errors.InvalidSchemaName,
        psycopg.errors.UndefinedFunction,
    )
    return isinstance(exc, missing) and "taskq" in str(exc)


def unavailable(exc: BaseException) -> TaskqError:
    """The one-line error for a failure to reach or use the database: a missing schema says
    "run taskq migrate" (exit 1); anything else is "database unavailable" (exit 3)."""
    if missing_schema(exc):
        return SchemaMissing(first_line(exc))
    return DatabaseUnavailable(f"database unavailable: {first_line(exc)}")


def connect(
    dsn: str, *, role: str = "cli", autocommit: bool = False, **kwargs: Any
) -> psycopg.Connection[dict[str, Any]]:
    """A sync connection with dict rows (the CLI and tests use these). ``kwargs`` go to
    ``psycopg.connect`` (the worker passes ``pooler_kwargs``)."""
    try:
        return psycopg.connect(
            for_writes(dsn),
            autocommit=autocommit,
            row_factory=dict_row,
            application_name=application_name(role),
            connect_timeout=10,
            **kwargs,
        )
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


def pooler_kwargs(*, pgbouncer: bool) -> dict[str, Any]:
    """Connection arguments for a worker whose connections go through PgBouncer in transaction
    mode (``taskq worker --pgbouncer``).

    psycopg prepares a statement server-side once it has run 5 times (``prepare_threshold``);
    the prepared statement lives in one server session, and under transaction pooling the next
    transaction may get another session: "prepared statement _pg3_0 does not exist" (or
    "already exists"). ``prepare_threshold=None`` never prepares; the cost is planning each
    statement again, small next to a round trip. Everything else taskq runs through such a
    connection is session-free: one statement or one transaction at a time, advisory locks only
    transaction-scoped; LISTEN, the one session-bound thing, has its own direct connection.
    """
    return {"prepare_threshold": None} if pgbouncer else {}


# Names PostgreSQL gives the UTC zone itself (Etc/UTC is what Debian's clusters and the
# official Docker image start with).
UTC_ALIASES = frozenset(
    {"Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu"}
)


async def utc_by_name(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``configure``: a session whose TimeZone is an alias of UTC gets plain 'UTC'.

    The same zone, so nothing a statement computes or returns changes. But psycopg turns a
    timestamptz into a datetime with ``datetime.timezone.utc`` only for the name 'UTC'; for
    any other name it goes through ``zoneinfo``, five times slower: with four timestamps per
    claimed task that was ~2 us of the worker's CPU per task, 5 % of a drain."""
    if conn.info.parameter_status("TimeZone") in UTC_ALIASES:
        await conn.execute("SET TimeZone = 'UTC'")


def connect_plain(dsn: str, *, role: str) -> psycopg.Connection[Any]:
    """A sync connection with psycopg's default (tuple) rows, for user code (reconcilers)."""
    try:
        return psycopg.connect(
            for_writes(dsn), application_name=application_name(role), connect_timeout=10
        )
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


async def aconnect(
    dsn: str, *, role: str, autocommit: bool = False, **kwargs: Any
) -> psycopg.AsyncConnection[dict[str, Any]]:
    try:
        return await psycopg.AsyncConnection.connect(
            for_writes(dsn),
            autocommit=autocommit,
            row_factory=dict_row,
            application_name=application_name(role),
            connect_timeout=10,
            **kwargs,
        )
    except ConnectionError_ as exc:
        raise unavailable(exc) from None


def _maybe_gone(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle pooled connection may have been closed by the server, found without a
    round trip. An idle connection receives nothing, unless the server is saying goodbye: a
    terminated backend, a restart, a failover or a PgBouncer restart send an error and close.
    Anything waiting on the socket (or a broken socket) means: test it for real."""
    if conn.closed or conn.pgconn.status != psycopg.pq.ConnStatus.OK:
        return True
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def check_connection(conn: psycopg.Connection[Any]) -> None:
    """The sync pools' ``check`` at checkout: raise (the pool then discards the connection and
    hands out another) if the server closed it while it sat idle. Costs a round trip only when
    something arrived on the idle socket, so the hot path pays nothing."""
    if _maybe_gone(conn):
        if conn.closed:
            raise psycopg.OperationalError("the connection is closed")
        conn.execute("")


async def acheck_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """``check_connection`` for the async pools."""
    if _maybe_gone(conn):
        if conn.closed:
            raise psycopg.OperationalError("the connection is closed")
        await conn.execute("")


class KeptConnection:
    """One connection of an async pool, kept by one user (a claimer, the completer) from use
    to use instead of taken from the pool each time.

    The pool hands its idle connections out in turn, so a loop that checks one out per round
    spreads its statements over every backend: each plans them again (the first claim on a
    backend plans every statement of the claim functions, 12-35 ms), and the database keeps
    several backends warm for work one could do. Kept, the connection is checked before each
    use as the pool checks at checkout (a round trip only when the server sent something to
    the idle socket); a closed one is given back and another taken. ``use`` gives it back after
    any error (the pool then resets or replaces it); the user calls ``give_back`` when it stops.

    ``settings`` are session settings for this user's statements (the completer's planner
    settings): set on each connection taken, reset before it goes back to the pool, where it
    serves handlers that must not see them (closed instead if the reset fails).
    """

    def __init__(
        self, pool: AsyncConnectionPool[Any], *, settings: Mapping[str, str] | None = None
    ) -> None:
        self._pool = pool
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._settings = dict(settings or {})

    async def get(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is not None:
            try:
                await acheck_connection(conn)
                return conn
            except psycopg.Error:
                await self.give_back()
        fresh: psycopg.AsyncConnection[Any] = await self._pool.getconn()
        if self._settings:
            try:
                await fresh.execute(set_config(self._settings, local=False))
            except BaseException:
                await self._pool.putconn(fresh)
                raise
        self._conn = fresh
        return fresh

    async def give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._settings and not conn.closed:
            try:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.rollback()
                for name in self._settings:
                    reset = psycopg.sql.SQL("RESET {}").format(psycopg.sql.Identifier(name))
                    await conn.execute(reset)
            except psycopg.Error:
                await conn.close()  # the pool discards a closed connection
        await self._pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The kept connection for one use; given back if the use raises."""
        conn = await self.get()
        try:
            yield conn
        except BaseException:
            await self.give_back()
            raise


def set_config(settings: Mapping[str, str], *, local: bool) -> psycopg.sql.Composed:
    """One statement that sets ``settings`` for the session, or with ``local`` for the
    current transaction only (SET LOCAL)."""
    return psycopg.sql.SQL("SELECT {}").format(
        psycopg.sql.SQL(", ").join(
            psycopg.sql.SQL("set_config({}, {}, {})").format(
                psycopg.sql.Literal(name), psycopg.sql.Literal(value), psycopg.sql.Literal(local)
            )
            for name, value in settings.items()
        )
    )


@contextlib.contextmanager
def session(dsn: str, *, role: str = "cli") -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """One short-lived connection; commits on success, rolls back on error."""
    conn = connect(dsn, role=role)
    try:
        with conn:
            yield conn
    except ConnectionError_ as exc:
        raise unavailable(exc) from None
