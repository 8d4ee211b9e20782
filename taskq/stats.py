"""Numbers for operators: the backlog by queue, task type and status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskq import store
from taskq.db import session
from taskq.model import Status


@dataclass(slots=True)
class TypeStats:
    queue: str
    task_type: str
    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Status})
    runnable: int = 0
    oldest_runnable_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "task_type": self.task_type,
            "counts": self.counts,
            "runnable": self.runnable,
            "oldest_runnable_seconds": self.oldest_runnable_seconds,
        }


def backlog(dsn: str) -> list[TypeStats]:
    with session(dsn) as conn:
        rows = store.counts_by_status(conn)
    by_key: dict[tuple[str, str], TypeStats] = {}
    for row in rows:
        key = (row["queue"], row["task_type"])
        entry = by_key.setdefault(key, TypeStats(queue=key[0], task_type=key[1]))
        entry.counts[row["status"]] = int(row["total"])
        entry.runnable += int(row["runnable"])
        age = row["oldest_runnable_seconds"]
        if age is not None:
            entry.oldest_runnable_seconds = max(entry.oldest_runnable_seconds or 0.0, float(age))
    return [by_key[k] for k in sorted(by_key)]
