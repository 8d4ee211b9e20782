"""systemd's notify protocol, spoken directly (no libsystemd): one datagram per message to
``$NOTIFY_SOCKET``. Every function is a no-op when not started by systemd with Type=notify."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send e.g. ``READY=1``, ``STOPPING=1``, ``WATCHDOG=1``. True if sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_seconds() -> float | None:
    """The watchdog period systemd expects us to beat within (``WatchdogSec=``), if any."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec) / 1_000_000
    except ValueError:
        return None
    return value if value > 0 else None
