"""The garbage collector's settings for a ``taskq worker`` process (the CLI's process only: an
application that runs ``Worker`` in its own process keeps its own settings).

Every attempt allocates a few dozen container objects (its asyncio task, coroutine frames,
context, outcome), and with a hundred attempts in flight most of them are alive when CPython's
young collection runs: at the default threshold (700 allocations) it ran every few dozen
attempts, traversed the in-flight ones, promoted them, and the older generations traversed them
again, with every module, class and function the process imported. That was 7-8 % of a drain
worker's CPU (perf, 100,000 no-op tasks, 100 slots). Two settings bring it to nothing:

- a young-generation threshold of 5,000 allocations: a collection every few hundred attempts,
  which by then have mostly been freed by reference counting (cyclic garbage waits a little
  longer; the amount is bounded by the threshold);
- ``gc.freeze()`` once the application is imported: the startup objects move to the permanent
  generation, out of every later full collection.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000


def before_app_import() -> None:
    """Raise the young threshold; an application module that sets its own, when imported
    next, wins."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(YOUNG_THRESHOLD, young), middle, old)


def after_app_import() -> None:
    """Move everything imported so far out of the collector's way."""
    gc.collect()
    gc.freeze()
