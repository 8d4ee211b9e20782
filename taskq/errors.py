"""One error hierarchy. psycopg errors are translated where SQL runs, by SQLSTATE, so callers
(and the CLI, which turns these into one line on stderr) never see driver exceptions."""

from __future__ import annotations


class TaskqError(Exception):
    """Root of every error taskq raises on purpose."""

    exit_code = 1


class ConfigError(TaskqError):
    """Bad configuration or command-line input (unknown --app, bad --queues, ...)."""


class InvalidTask(TaskqError):
    """A task that must not be enqueued: bad name, bad priority, bad payload."""


class PayloadError(InvalidTask):
    """The payload is not JSON-serialisable or is larger than the configured limit."""


class AlreadyEnqueued(TaskqError):
    """A live task with the same (task_type, unique key) exists; ``existing_id`` is its id."""

    def __init__(self, message: str, existing_ids: list[int]) -> None:
        super().__init__(message)
        self.existing_ids = existing_ids

    @property
    def existing_id(self) -> int:
        return self.existing_ids[0]


class UnknownTaskType(TaskqError):
    """No handler is registered for this task type (``taskq enqueue --app``). Enqueueing from
    Python accepts any valid type: a handler may live in another service."""


class TaskNotFound(TaskqError):
    """No task with this id (in the state the operation needs)."""


class LeaseLost(TaskqError):
    """This attempt's token no longer matches the row: the task was taken away from us."""


class Cancelled(TaskqError):
    """Raised by ``ctx.raise_if_cancelled()`` once an operator asked this attempt to abort
    (``taskq cancel``, ``app.cancel``). Let it propagate: the attempt ends CANCELLED, with no
    retry and no dead letter."""


class Unhealthy(TaskqError):
    """``taskq health``: the database answered, but the worker it looked for is missing or has
    stopped heart-beating. Exit code 1, which container health checks read as "unhealthy"."""


class SchemaMissing(TaskqError):
    """The database is there, the taskq schema is not (or is older than this taskq): the fix is
    ``taskq migrate`` with the same DSN, not a retry."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "the taskq schema is missing from this database: run `taskq migrate` (with the same "
            "--dsn / TASKQ_DSN)" + (f" ({detail})" if detail else "")
        )


class DatabaseUnavailable(TaskqError):
    """PostgreSQL could not be reached or went away."""

    exit_code = 3


class Retry(Exception):
    """Raise from a handler to retry the task ``after`` seconds from now (database clock).

    A Retry counts as a failed attempt: once retry_count reaches max_retry_count the task goes
    to DEAD_LETTER, exactly like an ordinary exception.
    """

    def __init__(self, after: float, reason: str = "") -> None:
        if after < 0:
            raise ValueError("Retry(after=...) must be >= 0 seconds")
        super().__init__(reason or f"retry requested in {after:g}s")
        self.after = float(after)


class Permanent(Exception):
    """Raise from a handler when retrying cannot help: the task goes straight to DEAD_LETTER."""
