"""A primary and a streaming standby on this machine, for the failover tests.

Two Debian clusters (``pg_createcluster``) of the installed major version on free ports; the
standby is made with ``pg_basebackup`` and streams from the primary, either directly
(synchronous replication: ``synchronous_standby_names`` names it) or through a small TCP relay
that delays the primary's bytes (asynchronous replication with a known lag window, so that the
loss it allows is something the test can measure instead of a race it may or may not hit).

Everything runs as root, as on this machine and CI; the clusters are dropped at the end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg


def available() -> str | None:
    """Why the harness cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (pg_createcluster, runuser)"
    for tool in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "runuser"):
        if not shutil.which(tool):
            return f"{tool} not found (Debian's postgresql-common)"
    if not major():
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    return None


def major() -> str:
    versions = sorted(
        (p.name for p in Path("/usr/lib/postgresql").glob("*") if (p / "bin/postgres").exists()),
        key=int,
    )
    return versions[-1] if versions else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*cmd: str, timeout: float = 120) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


class Relay:
    """A TCP relay that holds every chunk from the upstream for ``delay`` seconds before passing
    it on: a replication link with a lag window we choose."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(
                target=self._pipe, args=(upstream, client, self.delay), daemon=True
            ).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delay: float) -> None:
        """Copy ``src`` to ``dst``; with a delay, each chunk leaves ``delay`` seconds after it
        arrived (a delay line, not a throttle: throughput is not capped)."""
        line: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def send() -> None:
            with contextlib.suppress(OSError):
                while True:
                    due, chunk = line.get()
                    if not chunk:
                        break
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    dst.sendall(chunk)
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                chunk = src.recv(65536)
                line.put((time.monotonic() + delay, chunk))
                if not chunk:
                    break
        line.put((0.0, b""))
        sender.join(timeout=5)
        src.close()
        dst.close()

    def close(self) -> None:
        self._stop.set()
        self._server.close()


@dataclass
class Node:
    name: str
    port: int
    version: str

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data_dir(self) -> Path:
        return Path(f"/var/lib/postgresql/{self.version}/{self.name}")

    @property
    def conf_dir(self) -> Path:
        return Path(f"/etc/postgresql/{self.version}/{self.name}")

    def ctl(self, *args: str) -> None:
        _run("pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, *args)

    def create(self, settings: dict[str, str]) -> None:
        _run("pg_createcluster", self.version, self.name, "-p", str(self.port), "--", "-A", "trust")
        (self.conf_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\n"
            "local replication all trust\nhost replication all 127.0.0.1/32 trust\n"
        )
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "wal_level": "replica",
            "max_wal_senders": "5",
            "hot_standby": "on",
            "wal_log_hints": "on",
            "fsync": "off",
            "shared_buffers": "32MB",
            "max_connections": "300",
            **settings,
        }
        conf_d = self.conf_dir / "conf.d"
        conf_d.mkdir(exist_ok=True)
        (conf_d / "taskq-failover.conf").write_text(
            "".join(f"{k} = {v}\n" for k, v in conf.items())
        )

    def base_backup_from(self, source_port: int, *, stream_port: int | None = None) -> None:
        """Replace this node's data with a copy of the server on ``source_port``, set to stream
        from it (or through ``stream_port``, a relay to it), named ``application_name=<name>``
        for synchronous replication."""
        # Empty the folder but keep it: it belongs to postgres, its parent may not let postgres
        # create it again.
        for child in self.data_dir.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        _run(
            "runuser", "-u", "postgres", "--",
            f"/usr/lib/postgresql/{self.version}/bin/pg_basebackup",
            "-h", "127.0.0.1", "-p", str(source_port), "-U", "postgres",
            "-D", str(self.data_dir), "-X", "stream", "-R", "-c", "fast",
        )  # fmt: skip
        with (self.data_dir / "postgresql.auto.conf").open("a") as f:
            port = stream_port or source_port
            f.write(
                f"primary_conninfo = 'host=127.0.0.1 port={port} user=postgres "
                f"application_name={self.name}'\n"
            )

    def drop(self) -> None:
        subprocess.run(
            ["pg_dropcluster", "--stop", self.version, self.name], capture_output=True, timeout=60
        )

    def is_up(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False


@dataclass
class Pair:
    """A primary (``a``) and a standby (``b``) of one database, ``taskq_failover``."""

    a: Node
    b: Node
    synchronous: bool
    relay: Relay | None = None
    nodes: list[Node] = field(default_factory=list)

    def dsn(self, *nodes: Node, read_write: bool = True) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in (nodes or (self.a, self.b)))
        query = "?target_session_attrs=read-write" if read_write else ""
        return f"postgresql://postgres@{hosts}/taskq_failover{query}"

    def node_dsn(self, node: Node) -> str:
        return f"postgresql://postgres@127.0.0.1:{node.port}/taskq_failover"

    def wait_streaming(self, timeout: float = 60) -> None:
        """Until the primary sees the standby streaming (and, once it is named in
        ``synchronous_standby_names``, as the synchronous standby)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                with psycopg.connect(self.a.dsn, autocommit=True) as c:
                    named = c.execute("SHOW synchronous_standby_names").fetchone()
                    row = c.execute(
                        "SELECT state, sync_state FROM pg_stat_replication "
                        "WHERE application_name = %s",
                        (self.b.name,),
                    ).fetchone()
                want_sync = bool(named and named[0])
                if row and row[0] == "streaming" and (not want_sync or row[1] == "sync"):
                    return
            time.sleep(0.1)
        raise TimeoutError("the standby never started streaming")

    def crash_primary(self) -> None:
        self.a.ctl("stop", "-m", "immediate")

    def promote_standby(self) -> None:
        self.b.ctl("promote")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(self.b.dsn, autocommit=True, connect_timeout=2) as c,
            ):
                row = c.execute("SELECT pg_is_in_recovery()").fetchone()
                if row and not row[0]:
                    return
            time.sleep(0.05)
        raise TimeoutError("the standby never left recovery")

    def rejoin_old_primary(self) -> None:
        """Bring the crashed primary back as a standby of the new one (re-synced by a fresh base
        backup, as an operator or Patroni would with pg_rewind or a re-clone)."""
        self.a.base_backup_from(self.b.port)
        self.a.ctl("start")


@contextlib.contextmanager
def replicated_pair(*, synchronous: bool, lag_seconds: float = 0.0) -> Iterator[Pair]:
    """Create, start and finally drop a primary with one streaming standby."""
    version = major()
    tag = f"tqfo{os.getpid()}{int(time.monotonic() * 1000) % 100000}"
    a = Node(f"{tag}a", free_port(), version)
    b = Node(f"{tag}b", free_port(), version)
    relay: Relay | None = None
    try:
        a.create({})
        a.ctl("start")
        with psycopg.connect(a.dsn, autocommit=True) as c:
            c.execute("CREATE DATABASE taskq_failover")
        b.create({})
        if lag_seconds:
            relay = Relay(a.port, lag_seconds)
        b.base_backup_from(a.port, stream_port=relay.port if relay else None)
        b.ctl("start")
        pair = Pair(a, b, synchronous, relay)
        pair.wait_streaming()
        if synchronous:
            # Named only now: a commit on the primary would wait for a standby not yet there.
            with psycopg.connect(a.dsn, autocommit=True) as c:
                c.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{b.name}'")
                c.execute("SELECT pg_reload_conf()")
            pair.wait_streaming()
        yield pair
    finally:
        if relay:
            relay.close()
        b.drop()
        a.drop()
