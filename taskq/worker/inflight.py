"""The claims of one worker process whose reply has not come back yet.

The completer waits for them before it sends a batch. In a busy worker the same finished
attempts wake the claimer (their slots are free) and the completer (their outcomes are
queued); the completer steps aside so the claim goes first (completer.py), and then, until
this, sent its batch while the claim was still running in the server. The two statements
then ran side by side on a 2-core machine shared with the worker, and each task's claim and
completion cost more database CPU than one after the other (both touch the same index pages
and rows). Sent once the claim's reply is back, the completion runs in the server while the
worker starts the attempts the claim returned, which is time the database was idle: drains
of 100,000 tasks, 1 process x 100 slots, ran 20,621 -> 22,072 tasks/s with 31.2 -> 29.1 us of
database CPU per task (medians of four alternated pairs, each faster and lower); with 2
processes the rate and CPU were unchanged.

Nobody waits for a completion (the slots are free already), so holding one back costs no
attempt anything. The wait is bounded (``settled``'s ``at_most``) so that a claim stuck in the
server, behind a lock or a dying connection, never holds the outcomes back for long.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class ClaimsInFlight:
    """Claim statements sent and not yet answered, across every claimer of the process."""

    def __init__(self) -> None:
        self._out: set[asyncio.Event] = set()

    def __len__(self) -> int:
        return len(self._out)

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        """Around one claim statement: from before it is sent until its rows are read (or it
        failed). The claimer starts the claimed attempts after this: a completer waiting in
        ``settled`` runs first, and sends its batch as the attempts start."""
        answered = asyncio.Event()
        self._out.add(answered)
        try:
            yield
        finally:
            self._out.discard(answered)
            answered.set()

    async def settled(self, at_most: float) -> None:
        """Return once every claim out now has its reply, or after ``at_most`` seconds. Claims
        sent after this call are not waited for: a stream of them cannot hold a batch back."""
        if not self._out:
            return
        # Awaited one by one (each wakes this task in one pass of the loop), not through
        # asyncio.wait, whose extra callback lets the started attempts run first.
        out = list(self._out)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(at_most):
                for answered in out:
                    await answered.wait()
