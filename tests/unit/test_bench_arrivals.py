"""bench/arrivals.py: the instants a latency run enqueues at."""

from __future__ import annotations

import itertools
import statistics

from bench import arrivals


def test_even_arrivals_are_one_interval_apart() -> None:
    assert arrivals.offsets(4, 0.02, random_arrivals=False) == [0.0, 0.02, 0.04, 0.06]


def test_random_arrivals_keep_the_mean_rate_and_are_the_same_in_every_run() -> None:
    found = arrivals.offsets(1500, 0.02, random_arrivals=True)
    assert found == arrivals.offsets(1500, 0.02, random_arrivals=True)  # seeded: both sides alike
    gaps = [b - a for a, b in itertools.pairwise(found)]
    assert found[0] == 0.0 and min(gaps) >= 0.0
    assert 0.018 <= statistics.fmean(gaps) <= 0.022
    # Poisson, not even: many gaps much shorter than the interval (exponential: 1 - e^-0.25).
    assert 0.17 <= sum(g < 0.005 for g in gaps) / len(gaps) <= 0.27
