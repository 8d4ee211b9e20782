"""The oban-py peer's pure parts: finding a Python >= 3.12 for its venv (a machine without one
skips the scenario instead of crashing), and the taskq-vs-oban-py latency rows."""

from __future__ import annotations

from pathlib import Path

from bench.harness import Measurement
from bench.peer_oban import find_python, python_candidates
from bench.run import oban_ratios


def _exe(path: Path, exit_code: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)
    return path


def test_candidates_are_path_names_then_pyenv_builds_newest_first(tmp_path: Path) -> None:
    bin_dir, versions = tmp_path / "bin", tmp_path / "versions"
    on_path = _exe(bin_dir / "python3.12", 0)
    _exe(bin_dir / "python3.11", 0)
    old = _exe(versions / "3.12.1" / "bin" / "python", 0)
    new = _exe(versions / "3.13.0" / "bin" / "python", 0)
    _exe(versions / "3.11.7" / "bin" / "python", 0)
    (versions / "3.14.0" / "bin").mkdir(parents=True)  # no interpreter inside
    assert python_candidates(str(bin_dir), versions) == [on_path, new, old]


def test_no_python_that_fits_gives_none(tmp_path: Path) -> None:
    bin_dir, versions = tmp_path / "bin", tmp_path / "versions"
    _exe(bin_dir / "python3.13", 1)  # a pyenv shim for a version not selected: fails
    _exe(versions / "3.12.1" / "bin" / "python", 1)
    _exe(versions / "3.11.7" / "bin" / "python", 0)  # runs, but too old: not a candidate
    assert find_python(python_candidates(str(bin_dir), versions)) is None
    assert python_candidates("", tmp_path / "absent") == []
    assert find_python([Path("/nonexistent/python3.12")]) is None


def test_the_first_candidate_that_works_is_chosen(tmp_path: Path) -> None:
    a, b = Path("/a/python3.13"), Path("/b/python")
    assert find_python([a, b], works=lambda p: p == b) == b


def test_latency_rows_read_above_one_as_taskq_faster() -> None:
    ours = Measurement("latency", "taskq (p50)", 2.0, "ms", {"p99_ms": 5.0, "max_ms": 8.0})
    theirs = Measurement("oban", "oban-py (p50)", 2.5, "ms", {"p99_ms": 10.0, "max_ms": 6.0})
    rows = {m.case.split(",")[0]: m for m in oban_ratios([ours, theirs])}
    assert rows["latency p99"].value == 2.0
    assert rows["latency max"].value == 0.75
    assert rows["latency p99"].details == {"taskq": 5.0, "oban-py": 10.0}
    assert oban_ratios([ours]) == []


def test_alternated_pairs_give_the_median_of_each_pairs_ratio() -> None:
    ours = Measurement("latency", "taskq (p50)", 2.0, "ms", {"p99_ms": 5.0, "max_ms": 8.0})
    theirs = Measurement("oban", "oban-py (p50)", 2.5, "ms", {"p99_ms": 10.0, "max_ms": 6.0})

    def pair(p99_ours: float, p99_theirs: float) -> dict[str, object]:
        return {
            "taskq": {"p50_ms": 1.0, "p99_ms": p99_ours, "max_ms": 4.0},
            "oban-py": {"p50_ms": 2.0, "p99_ms": p99_theirs, "max_ms": 2.0},
        }

    pairs = [pair(2.0, 3.0), pair(4.0, 2.0), pair(3.0, 3.3)]
    paired = Measurement("oban-pairs", "alternated", 3.0, "pairs", {"pairs": pairs})
    rows = {m.case: m for m in oban_ratios([ours, theirs, paired])}
    p99 = rows["latency p99, alternated pairs (theirs / ours)"]
    assert p99.value == 1.1 and p99.details["ratios"] == [1.5, 0.5, 1.1]
    assert rows["latency p50, alternated pairs (theirs / ours)"].value == 2.0
    assert rows["latency max, alternated pairs (theirs / ours)"].value == 0.5
    # Without pairs (an older run's results), only the best-run rows; pairs alone, theirs.
    assert len(oban_ratios([ours, theirs])) == 2
    assert len(oban_ratios([paired])) == 3
