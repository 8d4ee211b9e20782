"""The audit trail: every operator action (dead-letter requeue, discard, assign and resolve;
cancel; pauses; business switches; breaker resets; protection levels) is a row of
``taskq.audit``, written in the same statement as the change."""

from __future__ import annotations

from typing import Any

from taskq.db import store
from taskq.db.connection import session

Row = dict[str, Any]

# The audit actions taskq writes (the dashboard's Audit page offers these as a filter).
AUDIT_ACTIONS = (
    "dlq_requeue",
    "dlq_requeue_edited",
    "dlq_discard",
    "pause",
    "resume",
    "breaker_reset",
    "protection_level",
    "cancel",
    "abort_requested",
    "dlq_assign",
    "dlq_resolve",
    "dlq_requeue_run",
    "dlq_discard_run",
    "switch_set",
)


def audit_log(
    dsn: str, *, action: str | None, task_id: int | None, task_type: str | None, limit: int
) -> list[Row]:
    """Audit rows, newest first, optionally filtered."""
    with session(dsn) as conn:
        return store.audit_list(
            conn, action=action, task_id=task_id, task_type=task_type, limit=limit
        )
