"""``taskq server``: see and control the embedded development server (the no-``--dsn``
default). Only the embedded server: a real PostgreSQL is the operator's to run."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from taskq.cli.main import cli, json_option, out, print_json
from taskq.db import embedded
from taskq.db.dsn import resolve_dsn
from taskq.errors import ConfigError


@cli.group()
def server() -> None:
    """The embedded development server: status, url, psql, logs, stop."""


@server.command("status")
@json_option
def server_status(as_json: bool) -> None:
    """Is it running, where, and which taskq processes use it (checked for liveness)."""
    st = embedded.status()
    if as_json:
        print_json(
            {
                "data_dir": str(st.data_dir),
                "running": st.running,
                "pid": st.pid,
                "dsn": st.dsn,
                "clients": st.clients,
                "log_file": str(st.log_file),
                "os_user": st.os_user,
            }
        )
        return
    click.echo(f"data folder: {st.data_dir}")
    if not st.running:
        click.echo("server:      not running (any taskq command without --dsn starts it)")
    else:
        click.echo(f"server:      running, pid {st.pid}")
        click.echo(f"dsn:         {st.dsn}")
    clients = ", ".join(str(p) for p in st.clients) or "none"
    click.echo(f"clients:     {clients} (taskq processes using it; it stops after the last)")
    if st.os_user:
        click.echo(f"os user:     {st.os_user} (taskq runs as root; PostgreSQL refuses root)")
    click.echo(f"log:         {st.log_file}")


@server.command("url")
def server_url() -> None:
    """Print the DSN of the running server (for TASKQ_DSN, psql or your app)."""
    st = embedded.status()
    if not st.running or not st.dsn:
        raise ConfigError("the embedded server is not running; any taskq command starts it")
    click.echo(st.dsn)


@server.command("psql", context_settings={"ignore_unknown_options": True})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
def server_psql(psql_args: tuple[str, ...]) -> None:
    """Run the bundled psql on the embedded server (starting it if needed). Extra arguments go
    to psql, e.g. `taskq server psql -c 'TABLE taskq.tasks'`."""
    dsn = resolve_dsn(None) if not os.environ.get("TASKQ_DSN") else None
    if dsn is None:
        raise ConfigError("TASKQ_DSN is set: use your own psql against it")
    psql = embedded.bin_path() / "psql"
    cmd = [str(psql), dsn, *psql_args]
    done = subprocess.run(cmd)
    sys.exit(done.returncode)


@server.command("logs")
@click.option("--lines", "-n", type=click.IntRange(min=1), default=50, show_default=True)
def server_logs(lines: int) -> None:
    """The last lines of the server's log."""
    st = embedded.status()
    if not st.log_file.exists():
        raise ConfigError(f"no server log at {st.log_file}")
    text = st.log_file.read_text(errors="replace").splitlines()[-lines:]
    for line in text:
        out.print(line, markup=False, highlight=False)


@server.command("stop")
def server_stop() -> None:
    """Stop the server now (taskq processes still using it lose their connections)."""
    if embedded.stop():
        click.echo("stopped")
    else:
        click.echo("not running")
