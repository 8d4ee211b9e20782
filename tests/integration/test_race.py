"""Many worker processes racing on one queue: every task runs exactly once."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tests.support import WorkerProcess, rows, wait_until_sync


@pytest.mark.slow
def test_four_processes_four_slots_4000_tasks_each_runs_once(dsn: str, tmp_path: Path) -> None:
    rows(
        dsn,
        "INSERT INTO taskq.tasks (task_type, payload) SELECT"
        " CASE WHEN i %% 2 = 0 THEN 'test.record' ELSE 'test.record_sync' END,"
        " jsonb_build_object('i', i) FROM generate_series(1, 4000) AS i RETURNING id",
    )
    env = {"TASKQ_TEST_RUNS_DIR": str(tmp_path)}
    workers = [
        WorkerProcess(
            dsn,
            "tests.apps.basic:app",
            "--queues",
            "default=4",
            "--log-level",
            "warning",
            "--poll-interval",
            "0.5",
            env=env,
            log_dir=tmp_path / "logs",
        )
        for _ in range(4)
    ]
    try:
        wait_until_sync(
            lambda: (
                rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status <> 'SUCCESS'")[0]["n"]
                == 0
            ),
            timeout=120,
            what="4000 SUCCESS",
        )
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0, 0, 0], [w.log_path.read_text()[-2000:] for w in workers]
    runs = [
        line.split() for f in tmp_path.glob("runs-*.log") for line in f.read_text().splitlines()
    ]
    per_task = collections.Counter(int(r[0]) for r in runs)
    assert len(per_task) == 4000
    assert set(per_task.values()) == {1}, [t for t, n in per_task.items() if n > 1][:10]
    workers = {r[1] for r in runs}
    assert len(workers) == 4, "every process took part"
    leftovers = rows(dsn, "SELECT count(*) AS n FROM taskq.tasks WHERE status = 'PROCESSING'")
    assert leftovers[0]["n"] == 0
