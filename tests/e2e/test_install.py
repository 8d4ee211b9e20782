"""A wheel built from the checkout, installed into a fresh virtualenv the way a user installs
taskq (core only): no web framework comes with it, `taskq demo` runs, and `taskq dashboard`
says in one line which extra it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WEB = {"starlette", "uvicorn", "jinja2", "fastapi", "django", "asyncpg", "flask"}


def run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def test_core_wheel_in_a_fresh_venv_runs_the_demo(tmp_path: Path, dsn: str) -> None:
    built = run(
        sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", "w", cwd=tmp_path
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "w").glob("taskq-*.whl")
    made = run(sys.executable, "-m", "venv", "venv", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    bin_dir = tmp_path / "venv" / "bin"
    installed = run(bin_dir / "pip", "install", "-q", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]

    listed = run(bin_dir / "pip", "list", "--format=freeze", cwd=tmp_path)
    names = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert "taskq" in names and "psycopg" in names
    assert not names & WEB, sorted(names & WEB)

    demo = run(bin_dir / "taskq", "demo", "--dsn", dsn, cwd=tmp_path, timeout=180)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "all tasks settled" in demo.stdout

    dashboard = run(bin_dir / "taskq", "dashboard", "--dsn", dsn, cwd=tmp_path, timeout=60)
    assert dashboard.returncode == 1
    assert dashboard.stderr.strip().splitlines() == [
        "taskq: error: the dashboard needs the web extra (uvicorn is missing):"
        " pip install 'taskq[dashboard]'"
    ]
