"""The container image, built and run: migrate, a worker with an app mounted in (on uvloop), a
task enqueued from the host, the HEALTHCHECK, a graceful `docker stop`, and the image's size.

Needs a Docker daemon and a base image that is present locally (public images cannot be
pulled on the CI machine: `.ci/container-base` bootstraps one and `.ci/run` sets
TASKQ_DOCKER_BASE). Without either the test is skipped, saying which is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from typing import Any

import psycopg
import pytest

import taskq
from tests.support import ROOT, json_events, rows, wait_until_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE = "taskq:test"
MAX_IMAGE_BYTES = 250 * 1000 * 1000


def docker_cli() -> str | None:
    """The docker client. Debian's (/usr/bin/docker) builds with BuildKit by itself; a newer
    client elsewhere on PATH may need the buildx plugin for the same."""
    explicit = os.environ.get("TASKQ_DOCKER")
    if explicit:
        return explicit
    if os.path.exists("/usr/bin/docker"):
        return "/usr/bin/docker"
    return shutil.which("docker")


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    cli = docker_cli()
    assert cli is not None
    done = subprocess.run(
        [cli, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done.stdout.strip()


def container_logs(name: str) -> str:
    """What the container wrote to stdout and stderr (taskq logs to stderr; ``docker logs``
    passes each stream through as its own)."""
    cli = docker_cli()
    assert cli is not None
    done = subprocess.run([cli, "logs", name], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def image() -> str:
    cli = docker_cli()
    if cli is None:
        pytest.skip("no docker client installed")
    probe = subprocess.run([cli, "info"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"the Docker daemon is not running: {probe.stderr.strip()[-200:]}")
    base = os.environ.get("TASKQ_DOCKER_BASE", "python:3.12-slim")
    if subprocess.run([cli, "image", "inspect", base], capture_output=True).returncode != 0:
        pytest.skip(
            f"base image {base} is not present (public images cannot be pulled here):"
            " run .ci/container-base and set TASKQ_DOCKER_BASE=local/debian-py:bookworm"
        )
    # --network host: the build reaches the package registry the way the host does.
    docker(
        "build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "-t", IMAGE,
        str(ROOT), timeout=900,
    )  # fmt: skip
    return IMAGE


def test_image_size_is_under_250_mb(image: str) -> None:
    size = int(docker("image", "inspect", "--format", "{{.Size}}", image))
    print(f"image {image}: {size / 1e6:.0f} MB")
    assert size < MAX_IMAGE_BYTES


def test_image_runs_as_non_root_with_taskq_as_entrypoint(image: str) -> None:
    config = docker(
        "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}}", image
    )
    assert config == '10001:10001 ["taskq"]'
    assert docker("run", "--rm", image, "--help", timeout=60).startswith("Usage: taskq")


def test_migrate_worker_health_and_graceful_stop(image: str, empty_dsn: str) -> None:
    env = ["-e", f"TASKQ_DSN={empty_dsn}"]
    migrated = docker("run", "--rm", "--network", "host", *env, image, "migrate", timeout=120)
    assert "taskq schema" in migrated, migrated

    name = f"taskq-test-{uuid.uuid4().hex[:10]}"
    app_file = ROOT / "tests" / "apps" / "container.py"
    docker(
        "run", "-d", "--name", name, "--network", "host", *env,
        "-e", "TASKQ_APP=container_tasks:app",
        "-v", f"{app_file}:/app/container_tasks.py:ro",
        # The image's HEALTHCHECK, checked every second instead of every 30 (test speed).
        "--health-interval", "1s", "--health-start-period", "30s",
        image,
    )  # fmt: skip
    try:
        producer = taskq.App()
        with psycopg.connect(empty_dsn) as conn:
            hello = producer.enqueue(conn, "container.hello", {"name": "container"})

        def status(task_id: int) -> Any:
            return rows(empty_dsn, "SELECT status FROM taskq.tasks WHERE id = %s", (task_id,))[0][
                "status"
            ]

        wait_until_sync(lambda: status(hello) == "SUCCESS", timeout=60, what="the task to run")

        def health() -> str:
            return docker("inspect", "--format", "{{.State.Health.Status}}", name)

        wait_until_sync(lambda: health() == "healthy", timeout=60, what="health: healthy")

        with psycopg.connect(empty_dsn) as conn:
            slow = producer.enqueue(conn, "container.slow", {"seconds": 3})
        wait_until_sync(lambda: status(slow) == "PROCESSING", timeout=30, what="in flight")
        began = time.monotonic()
        docker("stop", "-t", "45", name, timeout=90)
        stopped_after = time.monotonic() - began
        assert docker("inspect", "--format", "{{.State.ExitCode}}", name) == "0"
        assert status(slow) == "SUCCESS"  # drained, not given back
        assert rows(empty_dsn, "SELECT id FROM taskq.tasks WHERE status = 'PROCESSING'") == []
        assert stopped_after < 40  # the drain, not docker's SIGKILL at 45 s
        # The image carries the speed extra: its worker runs on uvloop.
        events = json_events(container_logs(name))
        [starting] = [e for e in events if e.get("event") == "worker_starting"]
        assert starting["event_loop"] == "uvloop", starting
    finally:
        logs = container_logs(name)
        docker("rm", "-f", name, check=False)
        print("\n".join(logs.splitlines()[-30:]))
