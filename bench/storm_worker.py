"""``python -m bench.storm_worker DSN SLOTS``: one taskq worker running ``bench.apps:app`` with
the protection off (no breaker, no failure-rate trip).

The failure-storm scenario measures what writing failures costs the database. With the
protection on, the type's breaker would open after a handful of failures and stop the storm,
which is its job, and not what is measured. The scenario's drains (all succeed, all fail, all
fail and retry) run through this same runner so the only difference is the outcome.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import taskq
from bench.apps import app
from taskq import logs
from taskq.control.protection import ProtectionSettings

NEVER = 2**31 - 1


def main(argv: list[str]) -> None:
    dsn, slots = argv[0], int(argv[1])
    logs.configure("json", "warning")  # as the bench's other workers (--log-level warning)
    settings = taskq.WorkerSettings(
        queues={"default": slots},
        protection=ProtectionSettings(breaker_threshold=NEVER, breaker_failure_rate=2.0),
    )
    worker = taskq.Worker(app, dsn=dsn, settings=settings)

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.request_stop)
        await worker.run()

    asyncio.run(serve())


if __name__ == "__main__":
    main(sys.argv[1:])
