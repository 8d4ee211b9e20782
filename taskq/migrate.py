"""Schema migrations: alembic revisions that execute the numbered files in ``sql/ddl``.

The alembic configuration is built here in code, with the script folder resolved from the
installed package, so ``taskq migrate`` works from a wheel with no alembic.ini around.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator

from alembic import command
from alembic.config import Config

from taskq.db import ConnectionError_, unavailable
from taskq.errors import ConfigError
from taskq.sqlfiles import migrations_root


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
