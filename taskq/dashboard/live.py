"""Live progress of one task as Server-Sent Events, fed by ``LISTEN taskq_progress``.

Each stream has its own async connection (LISTEN is per session), opened before the row is
read, so no progress published between the read and the LISTEN is missed. The NOTIFY payload
(``{"id", "progress"}``, plus ``"status"`` on the last one) is filtered to this task and sent
on as it is; the row is re-read every few seconds as well, because only tasks that reported
progress get a final message, and the stream must end on the final status either way.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from taskq.db import store
from taskq.db.connection import aconnect
from taskq.ops.watch import FINAL, PROGRESS_CHANNEL

REREAD_SECONDS = 2.0
KEEPALIVE_SECONDS = 15.0


def sse(event: str, data: dict[str, Any]) -> str:
    """One event; the data is JSON on one line, so a payload cannot inject SSE fields."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


def state_of(row: dict[str, Any]) -> dict[str, Any]:
    progress = row.get("progress") or {}
    return {
        "id": row["id"],
        "status": row["status"],
        "percent": progress.get("percent"),
        "message": progress.get("message"),
        "retry_count": row["retry_count"],
        "max_retry_count": row["max_retry_count"],
    }


async def progress_events(
    dsn: str, task_id: int, over: Callable[[], Awaitable[bool]]
) -> AsyncGenerator[str, None]:
    """``state`` at connect and whenever the row changes, ``progress`` per NOTIFY for this task,
    then ``final`` (or ``gone`` when the row disappears) and the end of the stream. ``over``
    (the client left, the server is stopping) is asked at least once a second."""
    async with await aconnect(dsn, role="dashboard-progress", autocommit=True) as conn:
        await store.listen(conn, PROGRESS_CHANNEL)
        row = await store.aget_task(conn, task_id)
        if row is None:
            yield sse("gone", {"id": task_id})
            return
        last = state_of(row)
        yield sse("final" if last["status"] in FINAL else "state", last)
        if last["status"] in FINAL:
            return
        reread_at = time.monotonic() + REREAD_SECONDS
        quiet_since = time.monotonic()
        while not await over():
            async for note in conn.notifies(timeout=1.0, stop_after=1):
                message = _parse(note.payload)
                if message is None or message.get("id") != task_id:
                    continue
                progress = message.get("progress") or {}
                last = {
                    **last,
                    "status": message.get("status", last["status"]),
                    "percent": progress.get("percent"),
                    "message": progress.get("message"),
                }
                yield sse("progress", last)
                quiet_since = time.monotonic()
                if message.get("status") in FINAL:
                    reread_at = 0.0  # confirm from the row, then end
            if time.monotonic() >= reread_at:
                reread_at = time.monotonic() + REREAD_SECONDS
                row = await store.aget_task(conn, task_id)
                if row is None:
                    yield sse("gone", {"id": task_id})
                    return
                current = state_of(row)
                if current["status"] in FINAL:
                    yield sse("final", current)
                    return
                if current != last:
                    last = current
                    quiet_since = time.monotonic()
                    yield sse("state", current)
            if time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                quiet_since = time.monotonic()
                yield ": keepalive\n\n"  # a comment: finds a vanished client, keeps proxies open


def _parse(payload: str) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
