"""Retention: delete finished rows older than a cut-off, in batches.

Never one giant DELETE (a long transaction holds back vacuum and locks a million rows);
batches of a few thousand, each its own short transaction, oldest first. CANCELLED rows go with
SUCCESS; dead letters are kept unless asked, because an operator may still replay them. The
worker runs it on the leader every few minutes when started with ``--prune-after``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from taskq.db import store
from taskq.db.connection import connect

log = structlog.get_logger("taskq.ops.prune")


@dataclass(frozen=True, slots=True)
class Pruned:
    success: int
    dead_letter: int
    cancelled: int = 0


def prune(
    dsn: str,
    *,
    older_than_seconds: float,
    dead_letters: bool = False,
    batch: int = 5000,
    max_batches: int | None = None,
    connect_kwargs: Mapping[str, Any] | None = None,
) -> Pruned:
    """``connect_kwargs``: the worker's ``db.pooler_kwargs`` (behind PgBouncer)."""
    counts = {"success": 0, "cancelled": 0, "dead_letter": 0}
    kinds = ["success", "cancelled"] + (["dead_letter"] if dead_letters else [])
    with connect(dsn, role="prune", autocommit=True, **(connect_kwargs or {})) as conn:
        for kind in kinds:
            batches = 0
            while max_batches is None or batches < max_batches:
                deleted = store.prune_batch(
                    conn,
                    dead_letters=kind == "dead_letter",
                    cancelled=kind == "cancelled",
                    older_than_seconds=older_than_seconds,
                    batch=batch,
                )
                counts[kind] += deleted
                batches += 1
                if deleted < batch:
                    break
        store.prune_stats(conn, older_than_seconds=older_than_seconds)
        store.prune_backlog_samples(conn, older_than_seconds=older_than_seconds)
    result = Pruned(**counts)
    if result.success or result.dead_letter or result.cancelled:
        log.info(
            "tasks_pruned",
            success=result.success,
            cancelled=result.cancelled,
            dead_letter=result.dead_letter,
        )
    return result
