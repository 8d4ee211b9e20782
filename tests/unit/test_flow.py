"""Flow control's pure parts: rates, default bursts, what counts as held, the plan."""

from __future__ import annotations

import pytest

from taskq.errors import InvalidTask
from taskq.model import FlowLimits, held_by_limits, parse_rate
from taskq.ops.stats import plan


def test_parse_rate() -> None:
    assert parse_rate("20/s") == 20.0
    assert parse_rate("120/m") == 2.0
    assert parse_rate(" 36 / h ") == 0.01
    for bad in ("20", "20/d", "-1/s", "0/s", "x/s", ""):
        with pytest.raises(InvalidTask):
            parse_rate(bad)


def test_default_burst_is_one_second_of_the_rate() -> None:
    assert FlowLimits(rate="20/s").effective_burst == 20.0
    assert FlowLimits(rate="5/m").effective_burst == 1.0
    assert FlowLimits(rate="20/s", burst=3).effective_burst == 3.0
    assert FlowLimits(max_running=2).effective_burst is None
    assert not FlowLimits().any and FlowLimits(fair=True).any


def test_held_counts_only_what_a_binding_limit_holds() -> None:
    row = {"waiting": 7, "max_running": 2, "running": 2, "tokens": None}
    assert held_by_limits(row) == 7
    assert held_by_limits({**row, "running": 1}) == 0
    assert held_by_limits({"waiting": 7, "max_running": None, "running": 0, "tokens": 0.4}) == 7
    assert held_by_limits({"waiting": 0, "max_running": 1, "running": 1, "tokens": None}) == 0


def test_plan_takes_the_cap_into_account() -> None:
    result = plan(
        tasks=720, within_seconds=48 * 3600, mean_seconds=29 * 60, source="given", max_running=3
    )
    assert result.slots == 8
    assert result.limited_seconds == pytest.approx(720 * 29 * 60 / 3)
    assert (
        "with max_running=3 and a mean of 29 min, 720 tasks need 116 h: raise the cap to 8 to"
        " finish in 48 h" in result.warnings
    )
    rated = plan(
        tasks=720, within_seconds=3600, mean_seconds=1, source="given", rate_per_second=0.1
    )
    assert any("raise the rate to 12/m" in w for w in rated.warnings), rated.warnings
    free = plan(tasks=720, within_seconds=48 * 3600, mean_seconds=60, source="g", max_running=3)
    assert free.limited_seconds is None and not free.warnings
