"""Reconciliation: find business keys that should have a task and have none, and enqueue them.

A reconciler is ``fn(conn) -> keys`` registered with ``@app.reconciler(task_type, every=...)``.
It runs as a task of its own (``taskq.reconcile``, fired by a schedule), so it gets retries,
a dead letter and a log line like any task; ``taskq reconcile`` runs it by hand. A key that has
any task of that type (waiting, running, done or dead) is not missing; missing ones are
enqueued with uniqueness on (task_type, biz_id), so two runs at once still add each once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
import structlog

from taskq.db import store
from taskq.db.connection import connect_plain
from taskq.errors import ConfigError, InvalidTask
from taskq.model import JSON

if TYPE_CHECKING:
    from taskq.app import App
    from taskq.context import TaskContext

log = structlog.get_logger("taskq.reconcile")


@dataclass(frozen=True, slots=True)
class Report:
    name: str
    task_type: str
    candidates: int
    missing: list[str] = field(default_factory=list)
    enqueued: list[int] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task_type": self.task_type,
            "candidates": self.candidates,
            "missing": self.missing,
            "enqueued": self.enqueued,
            "dry_run": self.dry_run,
        }


def _normalise(found: Iterable[str | tuple[str, JSON]]) -> dict[str, JSON]:
    wanted: dict[str, JSON] = {}
    for entry in found:
        if isinstance(entry, str):
            wanted.setdefault(entry, {})
        elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
            wanted.setdefault(entry[0], entry[1])
        else:
            raise InvalidTask(f"a reconciler must yield keys or (key, payload) pairs: {entry!r}")
    return wanted


def run(app: App, name: str, conn: psycopg.Connection[Any], *, dry_run: bool = False) -> Report:
    """Run reconciler ``name`` on ``conn`` (autocommit or not: the enqueue is one statement)."""
    reconciler = app.reconcilers.get(name)
    if reconciler is None:
        known = ", ".join(sorted(app.reconcilers)) or "none"
        raise ConfigError(f"no reconciler named {name!r} (known: {known})")
    wanted = _normalise(reconciler.fn(conn))
    missing = store.tasks_without_task(conn, reconciler.task_type, list(wanted)) if wanted else []
    enqueued: list[int] = []
    if missing and not dry_run:
        enqueued = app.enqueue_many(
            conn,
            [
                {
                    "task_type": reconciler.task_type,
                    "payload": wanted[key],
                    "biz_id": key,
                    "unique": True,
                }
                for key in missing
            ],
        )
    report = Report(name, reconciler.task_type, len(wanted), missing, enqueued, dry_run)
    log.info(
        "reconcile_finished",
        reconciler=name,
        task_type=reconciler.task_type,
        candidates=report.candidates,
        missing=len(missing),
        enqueued=len(enqueued),
        dry_run=dry_run,
    )
    return report


def reconcile_handler(ctx: TaskContext, payload: JSON) -> None:
    """The ``taskq.reconcile`` task: runs the reconciler named in the payload."""
    name = payload.get("reconciler") if isinstance(payload, dict) else None
    if not isinstance(name, str):
        raise InvalidTask("taskq.reconcile needs a payload {'reconciler': name}")
    with ctx.connection() as conn:
        run(ctx.app, name, conn)


def run_all(app: App, names: Iterable[str], dsn: str, *, dry_run: bool = False) -> list[Report]:
    """``taskq reconcile``: run each reconciler in turn on one plain connection, committing
    after each, so one reconciler's enqueues stand even if a later one fails."""
    reports = []
    with connect_plain(dsn, role="reconcile") as conn:
        for name in names:
            reports.append(run(app, name, conn, dry_run=dry_run))
            conn.commit()
    return reports
