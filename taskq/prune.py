"""Retention: delete finished rows older than a cut-off, in batches.

Never one giant DELETE (a long transaction holds back vacuum and locks a million rows);
batches of a few thousand, each its own short transaction, oldest first. Dead letters are kept
unless asked, because an operator may still replay them. The worker runs it on the leader every
few minutes when started with ``--prune-after``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from taskq import store
from taskq.db import connect

log = structlog.get_logger("taskq.prune")


@dataclass(frozen=True, slots=True)
class Pruned:
    success: int
    dead_letter: int


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
    counts = {False: 0, True: 0}
    with connect(dsn, role="prune", autocommit=True, **(connect_kwargs or {})) as conn:
        for which in (False, True) if dead_letters else (False,):
            batches = 0
            while max_batches is None or batches < max_batches:
                deleted = store.prune_batch(
                    conn, dead_letters=which, older_than_seconds=older_than_seconds, batch=batch
                )
                counts[which] += deleted
                batches += 1
                if deleted < batch:
                    break
        store.prune_stats(conn, older_than_seconds=older_than_seconds)
    result = Pruned(success=counts[False], dead_letter=counts[True])
    if result.success or result.dead_letter:
        log.info("tasks_pruned", success=result.success, dead_letter=result.dead_letter)
    return result
