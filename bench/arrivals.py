"""When a latency run enqueues each task: evenly spaced, or at random (Poisson) instants.

Standard library only: the peers' producers import it too, in their own virtualenvs (as
``arrivals``, from the directory of the script they run).
"""

from __future__ import annotations

import random

SEED = 15
"""Fixed, so that every run (taskq's and each peer's) enqueues at the same instants."""


def offsets(count: int, interval: float, *, random_arrivals: bool) -> list[float]:
    """Seconds from the start at which each of ``count`` tasks is enqueued: one every
    ``interval``, or a Poisson process of the same mean rate. At random instants some tasks
    arrive just after a claim round, which evenly spaced ones never do."""
    if not random_arrivals:
        return [i * interval for i in range(count)]
    rng = random.Random(SEED)
    at, out = 0.0, []
    for _ in range(count):
        out.append(at)
        at += rng.expovariate(1.0 / interval)
    return out


def label(random_arrivals: bool) -> str:
    """What a latency measurement's name adds: nothing for the default, evenly spaced runs."""
    return ", random arrivals" if random_arrivals else ""
