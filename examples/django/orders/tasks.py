"""The shop's taskq app. The worker imports it (``taskq worker --app orders.tasks:app``), so it
sets Django up; handlers are plain functions (sync: Django's ORM is not async-safe) and run in
the worker's threads, each with its own Django connection."""

from __future__ import annotations

import os
from typing import Any

import django

import taskq

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()

from django.db import close_old_connections  # noqa: E402 - after setup

from orders.models import Order  # noqa: E402 - after setup

app = taskq.App()


@app.task("order.ship", max_retry_count=5)
def ship(ctx: taskq.TaskContext, payload: Any) -> None:
    close_old_connections()
    updated = Order.objects.filter(pk=payload["order_id"]).update(shipped=True)
    if not updated:
        raise taskq.Permanent(f"order {payload['order_id']} does not exist")
