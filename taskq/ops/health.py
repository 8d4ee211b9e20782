"""``taskq health``: is the database there, and is this worker heart-beating?

Made for container health checks (Docker ``HEALTHCHECK``, Kubernetes exec probes), which run a
command inside the worker's container and read its exit code. By default the check looks for a
worker on this host: a container's hostname is its own, so "a worker registered with this
hostname" is exactly "the worker in this container", whatever its PID, and the health check
needs no arguments. ``--pid`` narrows that to one process of this host (several workers on one
machine); ``--worker-id`` names one worker anywhere.

Freshness is judged on the database clock (``now() - heartbeat_at``), so a container with a
skewed clock cannot fool it. The limit is the worker's own lease (three heartbeats) unless
``--max-silence`` says otherwise: past its lease the reaper treats the worker as dead, so that
is when a supervisor should too.

A worker that heart-beats but has stopped claiming (its memory guard refuses to claim while
resident memory is above ``--max-memory``) is unhealthy once it has claimed nothing for longer
than that same limit: it is alive, but it does no work.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError, Unhealthy


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """The worker a health check judged (the freshest one matching), and the verdict's basis."""

    worker_id: str
    host: str
    pid: int
    silent_seconds: float
    limit_seconds: float
    claiming_stopped_reason: str | None = None
    claiming_stopped_seconds: float | None = None


def check(
    dsn: str,
    *,
    worker_id: str | None = None,
    pid: int | None = None,
    host: str | None = None,
    max_silence_seconds: float | None = None,
) -> WorkerHealth:
    """The healthy worker found; raises ``Unhealthy`` (none found, or silent too long) or
    ``DatabaseUnavailable`` (the database did not answer)."""
    if worker_id is not None and pid is not None:
        raise ConfigError("give --worker-id or --pid, not both")
    if max_silence_seconds is not None and max_silence_seconds <= 0:
        raise ConfigError("--max-silence must be > 0 seconds")
    # A worker id is unique across hosts; a PID means something only on its own host.
    where = None if worker_id is not None else (host or socket.gethostname())
    with session(dsn, role="health") as conn:
        row = store.worker_health(conn, worker_id=worker_id, host=where, pid=pid)
    if row is None:
        if worker_id is not None:
            raise Unhealthy(f"no worker {worker_id!r} is registered")
        if pid is not None:
            raise Unhealthy(f"no worker with pid {pid} is registered on host {where!r}")
        raise Unhealthy(f"no worker is registered on host {where!r}")
    limit = max_silence_seconds if max_silence_seconds is not None else row["lease_seconds"]
    found = WorkerHealth(
        worker_id=row["id"],
        host=row["host"],
        pid=int(row["pid"]),
        silent_seconds=float(row["silent_seconds"]),
        limit_seconds=float(limit),
        claiming_stopped_reason=row["claiming_stopped_reason"],
        claiming_stopped_seconds=row["claiming_stopped_seconds"],
    )
    if found.silent_seconds > found.limit_seconds:
        raise Unhealthy(
            f"worker {found.worker_id} last heart-beat {found.silent_seconds:.1f}s ago "
            f"(limit {found.limit_seconds:g}s)"
        )
    stopped = found.claiming_stopped_seconds
    if stopped is not None and stopped > found.limit_seconds:
        raise Unhealthy(
            f"worker {found.worker_id} has claimed nothing for {stopped:.1f}s "
            f"(limit {found.limit_seconds:g}s): {found.claiming_stopped_reason}"
        )
    return found
