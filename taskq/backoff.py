"""Capped, jittered delays for reconnecting and for polling.

Jitter keeps many workers from hammering a database that just came back at the same instant,
and from polling in lockstep."""

from __future__ import annotations

import random


def jittered(seconds: float, spread: float = 0.2) -> float:
    """``seconds`` +/- ``spread`` (as a fraction)."""
    return max(0.0, seconds * (1.0 + random.uniform(-spread, spread)))


class Backoff:
    """Exponential backoff: initial, x2 per failure, capped; reset after a success."""

    def __init__(self, initial: float = 0.1, cap: float = 5.0) -> None:
        self.initial = initial
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.initial * (2**self.failures))
        self.failures += 1
        return jittered(delay)

    def reset(self) -> None:
        self.failures = 0
