"""taskq: a PostgreSQL-only job queue. The ``taskq.tasks`` table is the queue."""

from __future__ import annotations

from taskq.app import App, EnqueueItem, Task
from taskq.context import TaskContext
from taskq.errors import (
    AlreadyEnqueued,
    ConfigError,
    DatabaseUnavailable,
    InvalidTask,
    LeaseLost,
    PayloadError,
    Permanent,
    Retry,
    TaskNotFound,
    TaskqError,
    UnknownTaskType,
)
from taskq.model import Status
from taskq.worker import Worker, WorkerSettings

__all__ = [
    "AlreadyEnqueued",
    "App",
    "ConfigError",
    "DatabaseUnavailable",
    "EnqueueItem",
    "InvalidTask",
    "LeaseLost",
    "PayloadError",
    "Permanent",
    "Retry",
    "Status",
    "Task",
    "TaskContext",
    "TaskNotFound",
    "TaskqError",
    "UnknownTaskType",
    "Worker",
    "WorkerSettings",
]
__version__ = "0.1.0"
