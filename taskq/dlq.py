"""Dead-letter operations for operators: list, show, requeue, discard.

Requeue and discard are all-or-nothing: when explicit ids are given and any of them is not a
dead letter, nothing changes and the error names them. Every action writes an audit row (who,
when, what, why) in the same statement as the change.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskq import store
from taskq.db import session
from taskq.errors import ConfigError, TaskNotFound

Row = dict[str, Any]


def actor() -> str:
    """Who is acting: the OS user and host (recorded in the audit table)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class Selection:
    ids: tuple[int, ...] | None = None
    task_type: str | None = None
    everything: bool = False

    def check(self) -> None:
        chosen = sum([bool(self.ids), self.task_type is not None, self.everything])
        if chosen == 0:
            raise ConfigError("say which dead letters: IDs, --task-type T, or --all")
        if chosen > 1:
            raise ConfigError("give only one of: IDs, --task-type, --all")


def list_dead(dsn: str, *, task_type: str | None = None, limit: int = 50) -> list[Row]:
    with session(dsn) as conn:
        return store.dlq_list(conn, task_type=task_type, limit=limit)


def show(dsn: str, task_id: int) -> tuple[Row, list[Row]]:
    """The task row and its audit history."""
    with session(dsn) as conn:
        row = store.get_task(conn, task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id}")
        return row, store.audit_for_task(conn, task_id)


def _check_ids(conn: Any, selection: Selection) -> list[Row]:
    found = store.dlq_select(conn, ids=selection.ids, task_type=selection.task_type)
    if selection.ids:
        missing = sorted(set(selection.ids) - {int(r["id"]) for r in found})
        if missing:
            described = []
            for task_id in missing:
                row = store.get_task(conn, task_id)
                described.append(
                    f"{task_id} ({row['status']})" if row else f"{task_id} (no such task)"
                )
            raise TaskNotFound("not a dead letter, nothing changed: " + ", ".join(described))
    return found


def preview(dsn: str, selection: Selection) -> list[Row]:
    """What a requeue or discard with this selection would touch."""
    selection.check()
    with session(dsn) as conn:
        return _check_ids(conn, selection)


def requeue(
    dsn: str,
    selection: Selection,
    *,
    reset_retries: bool = False,
    note: str | None = None,
    by: str | None = None,
) -> list[int]:
    """DEAD_LETTER -> PENDING for the selection; returns the ids moved. ``by`` names the actor
    in the audit row when it is not this OS user (the dashboard acts for someone)."""
    selection.check()
    with session(dsn) as conn:
        _check_ids(conn, selection)
        return store.dlq_requeue(
            conn,
            ids=_ids(selection.ids),
            task_type=selection.task_type,
            reset=reset_retries,
            actor=by or actor(),
            note=note,
        )


def discard(
    dsn: str, selection: Selection, *, note: str | None = None, by: str | None = None
) -> list[int]:
    """Delete the selected dead letters (the audit row keeps a copy); returns the ids."""
    selection.check()
    with session(dsn) as conn:
        _check_ids(conn, selection)
        return store.dlq_discard(
            conn,
            ids=_ids(selection.ids),
            task_type=selection.task_type,
            actor=by or actor(),
            note=note,
        )


def _ids(ids: Sequence[int] | None) -> list[int] | None:
    return list(ids) if ids else None
