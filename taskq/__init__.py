"""taskq: a PostgreSQL-only job queue. The ``taskq.tasks`` table is the queue."""

from __future__ import annotations

from taskq.app import App, EnqueueItem, Task
from taskq.context import TaskContext
from taskq.errors import (
    AlreadyEnqueued,
    Cancelled,
    ConfigError,
    DatabaseUnavailable,
    InvalidTask,
    LeaseLost,
    PayloadError,
    Permanent,
    Retry,
    SchemaMissing,
    TaskNotFound,
    TaskqError,
    UnknownTaskType,
)
from taskq.model import Status
from taskq.settings import WorkerSettings
from taskq.worker.worker import Worker

__all__ = [
    "AlreadyEnqueued",
    "App",
    "Cancelled",
    "ConfigError",
    "DatabaseUnavailable",
    "EnqueueItem",
    "InvalidTask",
    "LeaseLost",
    "PayloadError",
    "Permanent",
    "Retry",
    "SchemaMissing",
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
