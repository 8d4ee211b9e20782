"""Schema migrations: alembic revisions that execute the numbered files in ``sql/ddl``.

The alembic configuration is built here in code, with the script folder resolved from the
installed package, so ``taskq migrate`` works from a wheel with no alembic.ini around.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

import psycopg
from alembic import command
from alembic.config import Config

from taskq.db import store
from taskq.db.connection import ConnectionError_, connect, first_line, unavailable
from taskq.db.sqlfiles import migrations_root, roles
from taskq.errors import ConfigError


def _config(dsn: str | None, output: io.StringIO | None = None) -> Config:
    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(migrations_root()))
    if dsn:
        # configparser interpolation: a literal % in a password must be doubled.
        cfg.set_main_option("taskq.dsn", dsn.replace("%", "%%"))
    return cfg


@contextlib.contextmanager
def _quiet_alembic() -> Iterator[None]:
    logger = logging.getLogger("alembic")
    previous = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(previous)


def head() -> str:
    """The newest revision this taskq ships."""
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(_config(None)).get_current_head()
    assert found is not None
    return found


def current(dsn: str) -> str | None:
    """The revision the database is at, or None when it has no taskq schema."""
    with connect(dsn, role="migrate", autocommit=True) as conn:
        try:
            row = conn.execute("SELECT version_num FROM taskq.alembic_version").fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return None
    return str(row["version_num"]) if row else None


def upgrade(dsn: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Bring the schema up to ``revision``. Safe to run from many hosts at once. Returns the
    revisions before and after, so the caller can say what was done."""
    before = current(dsn)
    _upgrade(dsn, revision)
    return before, current(dsn)


def describe(before: str | None, after: str | None) -> str:
    """What ``upgrade`` did, in words: created, upgraded, or already there."""
    if before == after:
        return f"taskq schema already at {after}"
    if before is None:
        return f"created the taskq schema at {after}"
    return f"upgraded the taskq schema from {before} to {after}"


def ensure_at_head(dsn: str) -> str | None:
    """Migrate ``dsn`` if it is behind; what was done, or None when it was already at head.
    Only for the embedded development server: a real --dsn is never migrated implicitly."""
    if current(dsn) == head():
        return None
    return describe(*upgrade(dsn))


def _upgrade(dsn: str, revision: str) -> None:
    try:
        with _quiet_alembic():
            command.upgrade(_config(dsn), revision)
    except ConnectionError_ as exc:
        raise unavailable(exc) from None
    except Exception as exc:
        raise _translated(exc) from None


def downgrade(dsn: str, revision: str = "base") -> None:
    try:
        with _quiet_alembic():
            command.downgrade(_config(dsn), revision)
    except Exception as exc:
        raise _translated(exc) from None


def _translated(exc: Exception) -> Exception:
    """What the CLI should say about a failed migration, in one line. Alembic runs through
    SQLAlchemy, which wraps the driver's error (``.orig``) in a long multi-line message."""
    if _is_connection_error(exc):
        return unavailable(exc)
    orig = getattr(exc, "orig", None)
    cause = orig if isinstance(orig, psycopg.Error) else exc
    if isinstance(cause, psycopg.errors.InsufficientPrivilege):
        return ConfigError(
            f"cannot migrate: {first_line(cause)} (run taskq migrate as the owner of the taskq "
            "schema, or for the first run as a role that may CREATE in this database)"
        )
    if isinstance(cause, psycopg.Error):
        return ConfigError(f"migration failed: {first_line(cause)}")
    return exc


def sql_script(revision: str = "head", *, from_revision: str | None = None) -> str:
    """The SQL an upgrade would run, for review by a DBA (alembic offline mode)."""
    out = io.StringIO()
    target = f"{from_revision}:{revision}" if from_revision else revision
    try:
        with _quiet_alembic():
            command.upgrade(_config(None, out), target, sql=True)
    except Exception as exc:
        raise ConfigError(f"cannot render migration SQL: {exc}") from None
    return out.getvalue()


ROLE_NAMES = ("taskq_enqueuer", "taskq_worker", "taskq_operator")


def apply_roles(dsn: str) -> None:
    """Create the least-privilege roles if missing and (re)grant them (``sql/roles.sql``).

    One transaction: a failure leaves the previous grants in place, never half of the new ones.
    Needs the schema owner with CREATEROLE, which is why it is a separate step from the schema
    (``taskq migrate --roles``) rather than a migration: a DBA may run migrations as a role
    that must not create roles, and the roles are cluster-wide while migrations are not.
    """
    with connect(dsn, role="migrate") as conn:
        try:
            store.run_script(conn, roles())
        except ConnectionError_ as exc:
            raise unavailable(exc) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"cannot apply the taskq roles: {first_line(exc)} (run it as the owner of the "
                "taskq schema, with CREATEROLE)"
            ) from None


def roles_sql_script() -> str:
    """``sql/roles.sql`` wrapped in one transaction, for ``taskq migrate --sql --roles``."""
    return f"-- taskq roles (sql/roles.sql)\nBEGIN;\n\n{roles().strip()}\n\nCOMMIT;\n"


def _is_connection_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError_):
            return True
        orig = getattr(seen, "orig", None)
        if isinstance(orig, ConnectionError_):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
