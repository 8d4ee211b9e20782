"""``taskq dashboard``: serve the operator's web page. Thin like the rest of the CLI: check the
options, build the app, hand it to uvicorn."""

from __future__ import annotations

import socket
from pathlib import Path

import click

from taskq import settings as defaults
from taskq.cli.main import cli, dsn_option
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError
from taskq.ops.switches import circuit_status


@cli.command()
@click.option(
    "--host",
    default=defaults.DASHBOARD_HOST,
    show_default=True,
    help="Address to listen on. Anything but loopback requires --auth-token.",
)
@click.option(
    "--port", type=click.IntRange(1, 65535), default=defaults.DASHBOARD_PORT, show_default=True
)
@dsn_option
@click.option(
    "--auth-token",
    envvar="TASKQ_DASHBOARD_TOKEN",
    default=None,
    help="Require this token (login form or 'Authorization: Bearer'); at least 32 random "
    "characters. Default: $TASKQ_DASHBOARD_TOKEN. Prefer the variable or --auth-token-file: "
    "a command-line argument shows in ps.",
)
@click.option(
    "--auth-token-file",
    envvar="TASKQ_DASHBOARD_TOKEN_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read the token from this file; if it does not exist, generate a random token and "
    "store it there (mode 0600). Default: $TASKQ_DASHBOARD_TOKEN_FILE.",
)
@click.option("--read-only", is_flag=True, help="Show everything, change nothing (POST -> 403).")
def dashboard(
    host: str,
    port: int,
    dsn: str | None,
    auth_token: str | None,
    auth_token_file: Path | None,
    read_only: bool,
) -> None:
    """The operator's web page: overview, dead letters, tasks with live progress, pauses and
    the circuit, the audit trail."""
    # The web stack is imported here, not with the CLI: other commands start no slower for it,
    # and a core install (no taskq[dashboard] extra) runs every other command.
    try:
        import uvicorn

        from taskq.dashboard import DashboardSettings, create_app
        from taskq.dashboard.security import check_binding, token_from_file
    except ImportError as exc:
        raise ConfigError(
            f"the dashboard needs the web extra ({exc.name} is missing):"
            " pip install 'taskq[dashboard]'"
        ) from None

    if auth_token_file is not None:
        if auth_token is not None:
            raise ConfigError("give --auth-token or --auth-token-file, not both")
        auth_token, generated = token_from_file(auth_token_file)
        if generated:
            click.echo(f"taskq: generated a dashboard token in {auth_token_file}", err=True)

    # Before the embedded server or the database: an unprotected dashboard on a public address
    # is refused, with one line and exit code 1.
    check_binding(host, auth_token)
    url = resolve_dsn(dsn)
    circuit_status(url)  # fail now, with one line, if the database or the schema is not there
    server: uvicorn.Server | None = None
    app = create_app(
        DashboardSettings(dsn=url, host=host, auth_token=auth_token, read_only=read_only),
        stopping=lambda: server is not None and server.should_exit,
    )
    shown = f"[{host}]" if ":" in host else host
    # Bound here so that a port in use is one line and exit 1, like every refusal (uvicorn
    # would log it and exit 3, the code that means "database unavailable").
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {shown}:{port}: {exc.strerror or exc}") from None
    click.echo(
        f"taskq dashboard on http://{shown}:{port}/"
        + (" (read-only)" if read_only else "")
        + (" (token required)" if auth_token else ""),
        err=True,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        server_header=False,
        access_log=False,
        # Live-progress streams end within a second of SIGTERM (they watch should_exit); a
        # request still running after this is cancelled.
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
