"""The core install is lean: the web stack and the integrations' drivers are extras."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import requires

from tests.support import ROOT

CORE = {
    "cronsim",
    "psycopg",
    "psycopg-pool",
    "alembic",
    "click",
    "prometheus-client",
    "structlog",
    "rich",
}


def test_core_requirements_are_only_what_the_job_needs() -> None:
    core = set()
    for line in requires("taskq") or []:
        if "extra ==" not in line:
            found = re.match(r"[A-Za-z0-9_.-]+", line)
            assert found
            core.add(found.group(0).lower())
    assert core == CORE


def test_dashboard_without_its_extra_says_what_to_install() -> None:
    # None in sys.modules makes the import fail as if uvicorn were not installed.
    code = "import sys; sys.modules['uvicorn'] = None; from taskq.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "dashboard"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "taskq: error: the dashboard needs the web extra (uvicorn is missing):"
        " pip install 'taskq[dashboard]'"
    ]


def test_importing_taskq_loads_no_web_framework_or_driver() -> None:
    code = (
        "import sys, taskq, taskq.cli, taskq.worker;"
        "print(sorted(m for m in ('starlette', 'uvicorn', 'jinja2', 'sqlalchemy', 'django',"
        " 'asyncpg', 'opentelemetry') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
