"""The examples run: examples/fastapi_sqlalchemy (uvicorn) and examples/django (runserver),
each with a `taskq worker`, as subprocesses, with real HTTP requests. A request that fails after
enqueueing leaves neither order nor task; one that succeeds has its order shipped by the
worker, woken by the commit."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.support import ROOT, WorkerProcess, rows, wait_until_sync

FASTAPI = ROOT / "examples" / "fastapi_sqlalchemy"
DJANGO = ROOT / "examples" / "django"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def asyncpg_url(dsn: str) -> str:
    """SQLAlchemy's asyncpg URL for ``dsn``; a Unix-socket directory (the embedded server's)
    goes in the query, where a path in the host part would be read as the database name."""
    p = conninfo_to_dict(dsn)
    host, port, user = p.get("host", "127.0.0.1"), p.get("port", "5432"), p.get("user", "root")
    if str(host).startswith("/"):
        return f"postgresql+asyncpg://{user}@/{p['dbname']}?host={host}&port={port}"
    return f"postgresql+asyncpg://{user}@{host}:{port}/{p['dbname']}"


def post(url: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextlib.contextmanager
def serving(command: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> Iterator[str]:
    """A web server subprocess on a free port (``{port}`` in ``command``); its base URL."""
    port = free_port()
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [part.format(port=port) for part in command],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def listening() -> bool:
                with socket.socket() as s:
                    return s.connect_ex(("127.0.0.1", port)) == 0

            wait_until_sync(listening, timeout=30, what=f"{command[2]} to listen")
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def setup(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture
def fastapi_service(dsn: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    pytest.importorskip("fastapi")
    extra = {"DATABASE_URL": asyncpg_url(dsn), "TASKQ_DSN": dsn, "PYTHONPATH": str(FASTAPI)}
    env = {**os.environ, **extra}
    setup(
        [sys.executable, "-c", "import asyncio, service; asyncio.run(service.create_tables())"],
        FASTAPI,
        env,
    )
    command = [sys.executable, "-m", "uvicorn", "service:api", "--port", "{port}"]
    with serving(command, FASTAPI, env, tmp_path / "uvicorn.log") as url:
        yield url, extra


@pytest.fixture
def django_service(dsn: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    pytest.importorskip("django")
    extra = {"TASKQ_DSN": dsn, "PYTHONPATH": str(DJANGO), "DJANGO_SETTINGS_MODULE": "shop.settings"}
    env = {**os.environ, **extra}
    setup([sys.executable, "manage.py", "migrate", "--verbosity", "0"], DJANGO, env)
    command = [sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:{port}"]
    with serving(command, DJANGO, env, tmp_path / "runserver.log") as url:
        yield url, extra


@pytest.mark.slow
@pytest.mark.parametrize(
    ("service", "app", "table"),
    [
        ("fastapi_service", "service:tasks", "orders"),
        ("django_service", "orders.tasks:app", "orders_order"),
    ],
)
def test_order_and_task_commit_or_roll_back_together(
    dsn: str, service: str, app: str, table: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, env = request.getfixturevalue(service)
    orders = sql.SQL("SELECT id, shipped FROM {}").format(sql.Identifier(table))
    status, body = post(f"{url}/orders?item=book&fail=true")
    assert status == 500 and body == {"detail": "payment declined"}
    assert rows(dsn, orders) == []
    assert rows(dsn, "SELECT * FROM taskq.tasks") == []

    # Polling only every 30 s: a prompt start can only be the commit's NOTIFY.
    worker = WorkerProcess(dsn, app, "--poll-interval", "30", log_dir=tmp_path, env=env)
    worker.wait_ready()
    status, body = post(f"{url}/orders?item=book")
    answered = time.monotonic()
    assert status == 200, body
    order_id, task_id = body["order_id"], body["task_id"]

    def shipped() -> bool:
        return rows(dsn, orders) == [{"id": order_id, "shipped": True}]

    wait_until_sync(shipped, timeout=10, what="the worker to ship the order")
    print(
        f"{service}: order shipped {1000 * (time.monotonic() - answered):.0f} ms after the response"
    )
    # The handler's own commit (the order) comes before the completer writes SUCCESS.
    task_row = "SELECT status, payload FROM taskq.tasks WHERE id = %s"
    wait_until_sync(
        lambda: rows(dsn, task_row, (task_id,))[0]["status"] == "SUCCESS",
        timeout=10,
        what="the task's SUCCESS",
    )
    [task] = rows(dsn, task_row, (task_id,))
    assert task == {"status": "SUCCESS", "payload": {"order_id": order_id}}
    assert worker.stop() == 0
