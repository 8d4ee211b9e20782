"""One worker process: the composition root (``Worker``) and the services it starts."""

from __future__ import annotations

from taskq.settings import WorkerSettings
from taskq.worker.worker import Worker, parse_queues

__all__ = ["Worker", "WorkerSettings", "parse_queues"]
