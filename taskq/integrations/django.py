"""Django (4.2+, PostgreSQL backend with psycopg 3): enqueue through Django's connection.

Inside ``transaction.atomic()`` the task is part of the block: it commits with it, and a
rollback (an exception leaving the block, or a savepoint rolled back) removes it. Outside a
block Django autocommits, and so does the enqueue::

    from django.db import transaction
    from taskq.integrations.django import enqueue

    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue(app, "send_receipt", {"order": order.pk})             # using="default"

``app.enqueue(django.db.connection, ...)`` (or ``connections["other"]``) is the same thing.
taskq's tables live in their own schema and are managed by ``taskq migrate``, not by Django's
migrations: run it before (or next to) ``manage.py migrate`` in a deploy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg

from taskq.errors import ConfigError

try:
    from django.db import connections
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "taskq.integrations.django needs Django: pip install 'django>=4.2' psycopg"
    ) from exc

if TYPE_CHECKING:
    from taskq.app import App, EnqueueItem
    from taskq.model import JSON


def driver_connection(wrapper: Any) -> psycopg.Connection[Any]:
    """The psycopg connection under a Django database wrapper, connected if it was not."""
    wrapper.ensure_connection()
    driver = wrapper.connection
    if not isinstance(driver, psycopg.Connection):
        raise ConfigError(
            "taskq enqueues through Django's PostgreSQL backend with psycopg 3 (pip install"
            f" psycopg); the {wrapper.alias!r} database uses {type(driver).__module__}"
        )
    return driver


def enqueue(
    app: App, task_type: str, payload: JSON = None, *, using: str = "default", **options: Any
) -> int:
    """``app.enqueue`` through Django's connection ``using`` (in its atomic block, if any)."""
    task_id: int = app.enqueue(connections[using], task_type, payload, **options)
    return task_id


def enqueue_many(
    app: App,
    items: Iterable[EnqueueItem | Mapping[str, Any]],
    *,
    using: str = "default",
    **options: Any,
) -> list[int]:
    """``app.enqueue_many`` through Django's connection ``using``."""
    ids: list[int] = app.enqueue_many(connections[using], items, **options)
    return ids
