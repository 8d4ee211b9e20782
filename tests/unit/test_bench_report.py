"""The benchmark's report: the taskq-against-PgQueuer rows (each ratio reads "above 1 is better
for taskq", and the JSON keeps each system's own figure under its own name) and the title's
facts about the machine, and the failure storm's ratios round by round."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from bench import scenarios
from bench.harness import DrainTiming, Measurement
from bench.run import peer_ratios, render
from bench.scenarios import Context, _round_ratios, _storm_note, flatness_measurement, storm_rounds


def test_peer_ratios_keep_each_systems_figure_under_its_name() -> None:
    ours = Measurement(
        "drain",
        "100,000 tasks, 1 proc x 100 slots",
        18_000.0,
        "tasks/s",
        {
            "slots": 100,
            "tasks": 100_000,
            "processes": 1,
            "worker_cpu_us_per_task": 30.0,
            "db_cpu_us_per_task": 40.0,
        },
    )
    theirs = Measurement(
        "peer",
        "PgQueuer: drain 100,000, 1 proc, batch 100",
        20_000.0,
        "tasks/s",
        {
            "tasks": 100_000,
            "processes": 1,
            "batch_size": 100,
            "worker_cpu_us_per_task": 33.0,
            "db_cpu_us_per_task": 32.0,
        },
    )
    rows = {m.case.split(",")[0]: m for m in peer_ratios([ours, theirs])}
    assert rows["drain 100"].value == 0.9  # rate: taskq / PgQueuer
    assert rows["worker CPU/task"].value == 1.1  # CPU: PgQueuer's / taskq's
    assert rows["db CPU/task"].value == 0.8
    assert rows["db CPU/task"].details == {"taskq": 40.0, "pgqueuer": 32.0}
    assert rows["worker CPU/task"].details == {"taskq": 30.0, "pgqueuer": 33.0}


def test_the_report_title_says_how_fast_the_machine_ran_python() -> None:
    """Absolute figures (worker CPU per task, latency in ms) move with the machine's speed,
    so the title carries the run's calibration beside the load average."""
    out = io.StringIO()
    meta = {
        "taskq_version": "0.1.0",
        "git": "abc1234",
        "cpus": 2,
        "server": {"server_version": "15.20", "synchronous_commit": "on", "autovacuum": "off"},
        "loadavg_at_start": [0.25, 0.1, 0.05],
        "python_10m_additions_s": 1.4,
        "quick": False,
    }
    render(Console(file=out, width=300), [], meta)
    title = " ".join(out.getvalue().split())  # rich wraps the title to the table's width
    assert "load avg at start 0.25, 10M Python additions 1.40 s" in title


def test_the_failure_storm_reports_each_rounds_own_ratio_beside_the_ratio_of_medians() -> None:
    def run(ms: float) -> dict[str, float]:
        return {"db_cpu_ms_per_attempt": ms}

    # Each round's failing drain is set against that round's succeeding one, in order.
    success = [run(0.045), run(0.054), run(0.050)]
    retry = [run(0.060), run(0.090), run(0.065)]
    ratios = _round_ratios(retry, success)
    assert ratios == [1.33, 1.67, 1.3]
    assert _storm_note(ratios) == "target <= 1.5; rounds 1.33, 1.67, 1.30, median 1.33"
    assert _storm_note([1.2]) == "target <= 1.5"


def test_a_full_run_drains_the_storm_in_five_rounds_or_more() -> None:
    def ctx(quick: bool, repeat: int) -> Context:
        return Context("", quick, Path("."), Console(file=io.StringIO()), False, repeat=repeat)

    assert [storm_rounds(ctx(False, r)) for r in (1, 3, 5, 7)] == [5, 5, 5, 7]
    assert [storm_rounds(ctx(True, r)) for r in (0, 1, 3)] == [1, 1, 3]


def _timing(tasks: int, rate: float) -> DrainTiming:
    """A drain whose steady rate is ``rate`` (NaN: no steady span, one SUCCESS instant)."""
    span_ns = 0 if rate != rate else round((tasks - 1) / rate * 1e9)
    claims = tasks // 100
    return DrainTiming(tasks, 0, 1_000, 1_000 + span_ns, 2_000 + span_ns, claims, claims)


def test_flatness_sets_each_rounds_large_drain_against_the_small_one_beside_it() -> None:
    small = [_timing(20_000, r) for r in (10_000.0, 8_000.0, 9_000.0)]
    large = [_timing(100_000, r) for r in (9_000.0, 8_400.0, 9_900.0)]
    row = flatness_measurement("1 proc x 100 slots", small, large)
    assert row.details["rounds"] == [90.0, 105.0, 110.0]
    assert row.value == 105.0  # the median of the rounds' own ratios
    assert row.details["best_over_best"] == 99.0  # 9,900 / 10,000
    assert row.case == "1 proc x 100 slots: rate at 100,000 / at 20,000 tasks"
    # A round with a drain that had no steady span drops out instead of poisoning the median.
    row = flatness_measurement("x", small, [*large[:2], _timing(100_000, float("nan"))])
    assert row.details["rounds"] == [90.0, 105.0]


def test_drains_alternate_the_sizes_round_by_round(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, bool]] = []

    def fake_drain(
        ctx: Context, *, tasks: int, processes: int, slots: int, separate: bool = False
    ) -> DrainTiming:
        calls.append((tasks, processes, separate))
        return _timing(tasks, 10_000.0 if tasks == 20_000 else 9_800.0)

    monkeypatch.setattr(scenarios, "drain", fake_drain)
    ctx = Context("", False, Path("."), Console(file=io.StringIO()), True, repeat=3, slots=[100])
    rows = scenarios.drain_matrix(ctx)
    one = [tasks for tasks, processes, _ in calls if processes == 1]
    assert one == [20_000, 100_000, 100_000, 20_000, 20_000, 100_000]
    # Two separate workers drain the first size only; they have no flatness row.
    assert [t for t, _, separate in calls if separate] == [20_000] * 3
    flat = {m.case: m.value for m in rows if m.scenario == "flatness"}
    assert flat == {
        "1 proc x 100 slots: rate at 100,000 / at 20,000 tasks": 98.0,
        "--processes 2 x 100 slots: rate at 100,000 / at 20,000 tasks": 98.0,
    }
    drains = [m.case for m in rows if m.scenario == "drain"]
    assert drains[0] == "20,000 tasks, 1 proc x 100 slots"  # the table keeps its order
