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

from taskq import store
from taskq.db import ConnectionError_, connect, first_line, unavailable
from taskq.errors import ConfigError
from taskq.sqlfiles import migrations_root, roles


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


def upgrade(dsn: str, revision: str = "head") -> None:
    """Bring the schema up to ``revision``. Safe to run from many hosts at once."""
    try:
        with _quiet_alembic():
            command.upgrade(_config(dsn), revision)
    except ConnectionError_ as exc:
        raise unavailable(exc) from None
    except Exception as exc:
        if _is_connection_error(exc):
            raise unavailable(exc) from None
        raise


def downgrade(dsn: str, revision: str = "base") -> None:
    with _quiet_alembic():
        command.downgrade(_config(dsn), revision)


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
