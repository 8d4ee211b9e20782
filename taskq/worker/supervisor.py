"""``taskq worker --processes N``: N worker processes under one supervisor.

The design notes size a fleet as N consumers x M in-process workers; one Python process is
bound by one core (the GIL), so throughput on a multi-core host needs processes. Each child is
an ordinary ``taskq worker`` (same arguments, ``--processes 1``), with its own pool, heartbeat
and slots. The supervisor:

- restarts a child that dies (capped, jittered backoff, so a crash loop does not spin);
- passes SIGTERM/SIGINT through for the graceful drain; a second signal is passed through too
  (the children then give their in-flight tasks back at once), and children still alive after
  the drain window are SIGKILLed (the reaper rescues what they held);
- speaks systemd's notify protocol for the group: the children report to the supervisor's own
  socket, READY=1 goes to systemd once every child is ready, WATCHDOG=1 only while every child
  keeps petting its watchdog.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from taskq.backoff import Backoff
from taskq.worker import systemd

log = structlog.get_logger("taskq.worker.supervisor")


_UCRED = struct.Struct("3i")  # pid, uid, gid
_CRED_SPACE = socket.CMSG_SPACE(_UCRED.size)


def _sender_pid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, _uid, _gid = _UCRED.unpack(data[: _UCRED.size])
            return int(pid)
    return None


@dataclass
class Child:
    index: int
    proc: subprocess.Popen[bytes]
    pidfd: int
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    last_ping: float = field(default_factory=time.monotonic)


class Supervisor:
    def __init__(self, child_argv: list[str], processes: int, *, drain_seconds: float) -> None:
        self._argv = child_argv
        self._n = processes
        self._drain = drain_seconds
        self._children: dict[int, Child] = {}  # index -> child
        self._backoff = {i: Backoff(initial=1.0, cap=30.0) for i in range(processes)}
        self._respawn_at: dict[int, float] = {}
        self._stopping = False
        self._signals = 0
        self._announced_ready = False
        self._watchdog = systemd.watchdog_seconds()
        self._selector = selectors.DefaultSelector()
        self._folder = Path(tempfile.mkdtemp(prefix="taskq-supervisor-"))
        self._sock_path = self._folder / "notify.sock"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.bind(str(self._sock_path))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._sock.setblocking(False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    # --- children ------------------------------------------------------------------------

    def _spawn(self, index: int) -> None:
        env = {
            **os.environ,
            "NOTIFY_SOCKET": str(self._sock_path),
            "TASKQ_WORKER_INDEX": str(index),
        }
        env.pop("WATCHDOG_PID", None)
        if self._watchdog is None:
            env.pop("WATCHDOG_USEC", None)
        proc = subprocess.Popen(self._argv, env=env)
        pidfd = os.pidfd_open(proc.pid)
        child = Child(index, proc, pidfd)
        self._children[index] = child
        self._selector.register(pidfd, selectors.EVENT_READ, ("exit", index))
        log.info("worker_process_started", index=index, pid=proc.pid)

    def _reap(self, index: int) -> None:
        child = self._children.pop(index)
        self._selector.unregister(child.pidfd)
        os.close(child.pidfd)
        code = child.proc.wait()
        if self._stopping:
            log.info("worker_process_exited", index=index, pid=child.proc.pid, code=code)
            return
        uptime = time.monotonic() - child.started
        if uptime > 60:
            self._backoff[index].reset()  # it ran fine for a while: not a crash loop
        delay = self._backoff[index].next_delay()
        log.warning(
            "worker_process_died", index=index, pid=child.proc.pid, code=code, restart_in=delay
        )
        self._respawn_at[index] = time.monotonic() + delay

    # --- signals and systemd ---------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals += 1
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    def _begin_stop(self) -> None:
        first = not self._stopping
        self._stopping = True
        if first:
            systemd.notify("STOPPING=1")
            log.info("supervisor_stopping", children=len(self._children))
            self._deadline = time.monotonic() + self._drain + 15.0
        for child in self._children.values():
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        self._respawn_at.clear()

    def _read_notifications(self) -> None:
        """Children's notify messages; the kernel tells us which child sent each one."""
        while True:
            try:
                data, ancillary, _flags, _addr = self._sock.recvmsg(4096, _CRED_SPACE)
            except BlockingIOError:
                return
            pid = _sender_pid(ancillary)
            child = next((c for c in self._children.values() if c.proc.pid == pid), None)
            if child is None:
                continue
            text = data.decode(errors="replace")
            if "READY=1" in text:
                child.ready = True
            if "WATCHDOG=1" in text or "READY=1" in text:
                child.last_ping = time.monotonic()

    def _systemd(self) -> None:
        if (
            not self._announced_ready
            and self._children
            and all(c.ready for c in self._children.values())
            and len(self._children) == self._n
        ):
            self._announced_ready = True
            systemd.notify("READY=1")
            log.info("supervisor_ready", processes=self._n)
        if self._watchdog is not None and not self._stopping:
            fresh = all(
                time.monotonic() - c.last_ping < self._watchdog for c in self._children.values()
            )
            if fresh:
                systemd.notify("WATCHDOG=1")

    # --- main loop ---------------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("signal", -1))
        self._selector.register(self._sock, selectors.EVENT_READ, ("notify", -1))
        handled = 0
        try:
            for index in range(self._n):
                self._spawn(index)
            while self._children or (not self._stopping and self._respawn_at):
                timeout = 1.0
                if self._respawn_at:
                    timeout = max(
                        0.0, min(timeout, min(self._respawn_at.values()) - time.monotonic())
                    )
                for key, _ in self._selector.select(timeout):
                    kind, index = key.data
                    if kind == "exit":
                        self._reap(index)
                    elif kind == "signal":
                        os.read(self._wake_r, 64)
                    else:
                        self._read_notifications()
                if self._signals > handled:
                    handled = self._signals
                    self._begin_stop()
                now = time.monotonic()
                for index, when in list(self._respawn_at.items()):
                    if when <= now and not self._stopping:
                        del self._respawn_at[index]
                        self._spawn(index)
                if self._stopping and now > getattr(self, "_deadline", now + 1):
                    for child in self._children.values():
                        log.error("worker_process_killed", index=child.index, pid=child.proc.pid)
                        with contextlib.suppress(ProcessLookupError):
                            child.proc.kill()
                    self._deadline = now + 3600
                self._systemd()
        finally:
            for child in list(self._children.values()):
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
            self._sock.close()
            with contextlib.suppress(OSError):
                self._sock_path.unlink()
                self._folder.rmdir()
        log.info("supervisor_stopped")
        return 0


def child_argv(argv: list[str]) -> list[str]:
    """The worker's own command line with ``--processes`` replaced by ``--processes 1``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--processes":
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return [sys.executable, "-m", "taskq", *out, "--processes", "1"]
