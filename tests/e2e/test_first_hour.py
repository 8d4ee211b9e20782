"""The README's "Your first worker", run as a user runs it: subprocesses, from
``examples/quickstart``, on a fresh embedded server (its own ``TASKQ_HOME``), no DSN anywhere.

Then the embedded server's bookkeeping under signals: a dashboard killed by SIGTERM and a
``watch`` killed by SIGHUP leave no client behind, and the server stops after the last live
taskq process exits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from taskq.db import migrate
from tests.support import ROOT, taskq_command, wait_until_sync

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

QUICKSTART = ROOT / "examples" / "quickstart"
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}")
    return README[start : README.index("\n## ", start + 3)]


def steps() -> list[str]:
    """The commands of the README's walk-through, comments stripped."""
    block = section("Your first worker").split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKQ_")}
    env["TASKQ_HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def run(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*taskq_command(), *args],
        cwd=QUICKSTART,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*taskq_command(), *args],
            cwd=QUICKSTART,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            # As from a terminal, even when the suite runs under nohup (SIGHUP ignored, and
            # taskq rightly keeps an inherited "ignore").
            preexec_fn=_default_sighup,
        )


def _default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def status(env: dict[str, str]) -> dict[str, object]:
    done = run(env, "server", "status", "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_your_first_worker_as_the_readme_says(user_env: dict[str, str], tmp_path: Path) -> None:
    expected = [
        "cd examples/quickstart",
        "taskq migrate",
        "taskq worker --app mytasks:app &",
        """taskq enqueue hello.greet --payload '{"name": "Ada"}'""",
        "taskq watch 1",
        'export TASKQ_DSN="$(taskq server url)"',
        "python enqueue.py Grace",
        "taskq stats",
        "taskq dashboard",
        "kill %1",
        "taskq server status",
    ]
    assert steps() == expected  # the README and this test walk the same steps

    migrated = run(user_env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.strip() == f"created the taskq schema at {migrate.head()}"
    worker = start(user_env, "worker", "--app", "mytasks:app", log=tmp_path / "worker.log")
    try:
        enqueued = run(user_env, "enqueue", "hello.greet", "--payload", '{"name": "Ada"}')
        assert enqueued.returncode == 0, enqueued.stderr
        assert enqueued.stdout.strip() == "1"
        watched = run(user_env, "watch", "1", "--timeout", "60")
        assert watched.returncode == 0, watched.stderr
        assert "SUCCESS" in watched.stdout.splitlines()[-1]

        url = run(user_env, "server", "url")
        assert url.returncode == 0, url.stderr
        own = {**user_env, "TASKQ_DSN": url.stdout.strip()}
        produced = subprocess.run(
            [sys.executable, "enqueue.py", "Grace"],
            cwd=QUICKSTART,
            env=own,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert produced.returncode == 0, produced.stderr
        second = produced.stdout.strip()
        assert run(own, "watch", second, "--timeout", "60").returncode == 0
        stats = run(own, "stats")
        assert stats.returncode == 0, stats.stderr
        assert "hello.greet" in stats.stdout

        port = free_port()
        dashboard = start(
            user_env, "dashboard", "--port", str(port), log=tmp_path / "dashboard.log"
        )
        wait_until_sync(
            lambda: dashboard.pid in status(user_env)["clients"],  # type: ignore[operator]
            timeout=60,
            what="the dashboard as a client",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    log = (tmp_path / "worker.log").read_text()
    assert "hello, Ada" in log and "hello, Grace" in log

    # A dashboard stopped by SIGTERM and a watch stopped by SIGHUP leave no client behind.
    dashboard.send_signal(signal.SIGTERM)
    dashboard.wait(timeout=30)
    pending = run(user_env, "enqueue", "hello.greet", "--payload", '{"name": "Lin"}')
    watch = start(user_env, "watch", pending.stdout.strip(), log=tmp_path / "watch.log")
    wait_until_sync(
        lambda: watch.pid in status(user_env)["clients"],  # type: ignore[operator]
        timeout=60,
        what="watch as a client",
    )
    watch.send_signal(signal.SIGHUP)
    try:
        watch.wait(timeout=30)
    except subprocess.TimeoutExpired:
        watch.send_signal(signal.SIGUSR1)  # its threads' stacks, to its log
        wait_until_sync(
            lambda: "most recent call first" in (tmp_path / "watch.log").read_text(),
            what="the stacks",
        )
        watch.kill()
        pytest.fail(f"watch outlived SIGHUP by 30 s: {(tmp_path / 'watch.log').read_text()}")
    final = status(user_env)
    assert final["clients"] == []
    assert final["running"] is False, final  # the last live taskq process stopped it


def test_a_worker_on_a_database_without_the_schema_says_run_migrate(
    empty_dsn: str,
) -> None:
    done = subprocess.run(
        [*taskq_command(), "worker", "--app", "mytasks:app", "--dsn", empty_dsn],
        cwd=QUICKSTART,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `taskq migrate`" in lines[0], done.stderr
