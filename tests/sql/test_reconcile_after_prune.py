"""Reconciliation never re-enqueues finished work, even after retention pruned its row."""

from __future__ import annotations

from typing import Any

import psycopg

import taskq
from taskq.db import store
from taskq.ops import prune, reconcile


def test_pruned_success_of_a_reconciled_type_is_not_missing(dsn: str) -> None:
    app = taskq.App(dsn=dsn)

    @app.task("invoice.send")
    def send(ctx: taskq.TaskContext, payload: Any) -> None: ...

    @app.reconciler("invoice.send", every="1d")
    def invoices(conn: Any) -> list[str]:
        return ["inv-1", "inv-2"]

    with psycopg.connect(dsn, autocommit=True) as conn:
        store.register_task_types(conn, "w-1", app.type_registry())
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue, biz_id, status, started_at, finished_at)"
            " VALUES ('invoice.send', 'default', 'inv-1', 'SUCCESS',"
            " now() - interval '10 days', now() - interval '10 days'),"
            " ('other.type', 'default', 'x-1', 'SUCCESS',"
            " now() - interval '10 days', now() - interval '10 days')"
        )
    pruned = prune.prune(dsn, older_than_seconds=7 * 86400)
    assert pruned.success == 2
    with psycopg.connect(dsn) as conn:
        report = reconcile.run(app, "invoice.send", conn, dry_run=True)
        markers = conn.execute("SELECT task_type, biz_id FROM taskq.task_executed").fetchall()
    assert report.missing == ["inv-2"]  # inv-1 ran; its pruned row left a done marker
    assert markers == [("invoice.send", "inv-1")]  # only reconciled types keep markers
