"""Packaging for deployment: the wheel carries the SQL and the migrations, the Dockerfile says
what the image promises, the compose example wires the roles, the worker reads its settings
from the environment. No Docker engine is needed here: test_container.py builds and runs the
image where there is one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT, rows, wait_until_sync

# Subprocesses, a browser, a wheel build: seconds each; not in the everyday loop.
pytestmark = pytest.mark.slow


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped), by stage."""
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_builds_a_wheel_and_runs_it_as_a_non_root_worker() -> None:
    stages = dockerfile_stages()
    assert len(stages) == 2, "a build stage and a runtime stage"
    build, runtime = stages
    # The base is a build argument (CI passes a locally bootstrapped one); users get python.
    assert build[0] == "FROM ${BASE_IMAGE} AS build"
    assert any("pip wheel" in line for line in build)
    assert runtime[0] == "FROM ${BASE_IMAGE}"
    text = (ROOT / "Dockerfile").read_text()
    version = re.search(r"^ARG BASE_IMAGE=python:3\.(\d+)-slim$", text, re.M)
    assert version and int(version.group(1)) >= 11
    assert any("from=build" in line and "--no-index" in line for line in runtime)

    users = [line.split(None, 1)[1] for line in runtime if line.startswith("USER ")]
    assert users, "the runtime stage must switch to a non-root user"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users

    def last(instruction: str) -> str:
        found = [line for line in runtime if line.startswith(instruction + " ")]
        assert found, instruction
        return found[-1][len(instruction) + 1 :].strip()

    assert json.loads(last("ENTRYPOINT")) == ["taskq"]
    assert json.loads(last("CMD")) == ["worker"]
    healthcheck = last("HEALTHCHECK")
    assert re.search(r"CMD taskq health\b", healthcheck), healthcheck
    assert "|| exit 1" in healthcheck  # Docker reads 1 as unhealthy; taskq health may exit 3

    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_compose_example_runs_migrate_roles_a_worker_and_the_dashboard() -> None:
    text = (ROOT / "examples" / "docker-compose.yml").read_text()
    for service in ("postgres:", "migrate:", "worker:", "dashboard:"):
        assert re.search(rf"^  {service}$", text, re.M), service
    assert 'command: ["migrate", "--roles"]' in text
    assert "service_completed_successfully" in text
    assert "TASKQ_APP: tasks:app" in text and "TASKQ_QUEUES:" in text
    assert re.search(r"- dashboard\n\s+- --host\n\s+- 0\.0\.0\.0\n\s+- --port", text)
    assert "TASKQ_DASHBOARD_TOKEN: ${TASKQ_DASHBOARD_TOKEN" in text  # not an argument: ps
    # Each long-running service logs in as a member of its taskq role, not as the superuser.
    initdb = (ROOT / "examples" / "compose" / "initdb.sql").read_text()
    assert "CREATE ROLE worker LOGIN PASSWORD 'worker' IN ROLE taskq_worker;" in initdb
    assert "CREATE ROLE operator LOGIN PASSWORD 'operator' IN ROLE taskq_operator;" in initdb
    assert "postgresql://worker:worker@postgres" in text
    assert "postgresql://operator:operator@postgres" in text


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_wheel_carries_sql_and_migrations_and_works_installed(tmp_path: Path) -> None:
    """What the image installs: a wheel built from the checkout, installed without the
    checkout, finds its SQL and migrations inside the package and prints the full migration."""
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(wheels)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("taskq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, source in (("taskq/_sql/queries", "sql/queries"), ("taskq/_sql/ddl", "sql/ddl")):
        expected = {f"{folder}/{p.name}" for p in (ROOT / source).glob("*.sql")}
        assert expected and expected <= names, sorted(expected - names)
    for name in (
        "taskq/_sql/roles.sql",
        "taskq/_migrations/env.py",
        "taskq/_migrations/versions/0001_tasks.py",
        "taskq/py.typed",
    ):
        assert name in names, name

    # Installed on its own (the dependencies come from this environment), run from elsewhere.
    site = tmp_path / "site"
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "from taskq.db import sqlfiles; print(sqlfiles.sql_root())"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert where.stdout.strip() == str(site / "taskq" / "_sql"), where.stderr
    script = subprocess.run(
        [sys.executable, "-m", "taskq", "migrate", "--sql", "--roles"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert script.returncode == 0, script.stderr
    assert "CREATE TABLE taskq.tasks" in script.stdout
    assert "CREATE TABLE taskq.schedules" in script.stdout
    assert "GRANT INSERT (task_type" in script.stdout


def test_worker_reads_app_and_queues_from_the_environment(dsn: str, tmp_path: Path) -> None:
    """The image's CMD is a bare `worker`: TASKQ_APP, TASKQ_QUEUES and TASKQ_DSN do the rest."""
    log = (tmp_path / "worker.log").open("w")
    env = {
        **os.environ,
        "TASKQ_APP": "tests.apps.deploy:app",
        "TASKQ_QUEUES": "default=3",
        "TASKQ_DSN": dsn,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskq", "worker", "--log-format", "json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    try:
        wait_until_sync(
            lambda: (
                proc.poll() is not None
                or bool(rows(dsn, "SELECT 1 FROM taskq.workers WHERE pid = %s", (proc.pid,)))
            ),
            timeout=30,
            what="the worker registered",
        )
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        [worker] = rows(dsn, "SELECT queues FROM taskq.workers WHERE pid = %s", (proc.pid,))
        assert worker["queues"] == {"default": 3}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
