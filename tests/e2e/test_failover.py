"""A primary fails and its streaming standby is promoted mid-run (``tests/e2e/replication.py``).

A producer enqueues one task per transaction and records every acknowledged id; two worker
processes run quick and idempotent tasks; everything was given the multi-host DSN from the
start. The primary is stopped in immediate mode (a crash) and the standby promoted. With
synchronous replication nothing acknowledged may be lost; with asynchronous replication the loss
is the replication-lag window, measured and printed (the README's "High availability" quotes
these figures).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.apps.failover import app
from tests.e2e import replication
from tests.support import WorkerProcess, taskq_cli, wait_until_sync

why_not = replication.available()
pytestmark = [
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(why_not is not None, reason=f"failover harness: {why_not}"),
]

FAST = [
    "--heartbeat-interval", "0.5", "--reaper-interval", "0.3", "--timeout-grace", "0.5",
    "--poll-interval", "0.5", "--queues", "default=4", "--breaker-threshold", "100000",
]  # fmt: skip


@dataclass
class Producer:
    """Enqueues one task per transaction, as fast as the server acknowledges; an id counts as
    acknowledged only once its COMMIT returned."""

    dsn: str
    acked: list[tuple[int, int, float]] = field(default_factory=list)  # (n, id, monotonic)
    in_doubt: int = 0
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    while not self.stop.is_set():
                        n += 1
                        kind = "fo.effect" if n % 2 else "fo.quick"
                        task_id = app.enqueue(conn, kind, {"n": n}, biz_id=f"n{n}")
                        try:
                            conn.commit()
                        except psycopg.Error:
                            self.in_doubt += 1
                            raise
                        self.acked.append((n, task_id, time.monotonic()))
                        time.sleep(0.002)
            except psycopg.Error:
                self.errors += 1
                time.sleep(0.05)


def counts(dsn: str, query: str, params: Any = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(query, params).fetchall()


def run_failover(tmp_path: Path, *, synchronous: bool, lag_seconds: float) -> dict[str, Any]:
    with replication.replicated_pair(synchronous=synchronous, lag_seconds=lag_seconds) as pair:
        multi = pair.dsn()
        migrated = taskq_cli("migrate", "--dsn", pair.node_dsn(pair.a))
        assert migrated.returncode == 0, migrated.stderr
        with psycopg.connect(pair.node_dsn(pair.a), autocommit=True) as c:
            c.execute("CREATE TABLE effects (n bigint NOT NULL, task_id bigint NOT NULL)")
        workers = [
            WorkerProcess(multi, "tests.apps.failover:app", *FAST, log_dir=tmp_path / "logs")
            for _ in range(2)
        ]
        # A worker still starting when the primary crashes exits (it never reached a writable
        # database): the crash must find both running.
        for w in workers:
            w.wait_event("worker_ready")
        producer = Producer(multi)
        thread = threading.Thread(target=producer.run, daemon=True)
        thread.start()
        wait_until_sync(lambda: len(producer.acked) >= 300, timeout=60, what="300 enqueues")

        crashed_at = time.monotonic()
        pair.crash_primary()
        pair.promote_standby()
        promoted_at = time.monotonic()
        new_primary = pair.node_dsn(pair.b)
        [(promoted_db,)] = counts(new_primary, "SELECT now()")

        # Workers come back by themselves: the first claim on the new primary.
        wait_until_sync(
            lambda: (
                counts(
                    new_primary,
                    "SELECT count(*) FROM taskq.tasks WHERE started_at > %s",
                    (promoted_db,),
                )[0][0]
                > 0
            ),
            timeout=30,
            what="a claim on the new primary",
        )
        [(first_claim,)] = counts(
            new_primary,
            "SELECT extract(epoch FROM min(started_at) - %s)::float8 FROM taskq.tasks "
            "WHERE started_at > %s",
            (promoted_db, promoted_db),
        )
        wait_until_sync(lambda: len(producer.acked) >= 600, timeout=60, what="enqueues after")
        producer.stop.set()
        thread.join(timeout=10)

        acked_ids = [task_id for _, task_id, _ in producer.acked]
        settle = wait_until_sync
        with contextlib.ExitStack() as on_failure:
            on_failure.callback(
                lambda: print(
                    "statuses:",
                    counts(
                        new_primary,
                        "SELECT status, task_type, count(*), max(retry_count), "
                        "min(last_error) FROM taskq.tasks GROUP BY 1, 2",
                    ),
                    *(w.log_path.read_text()[-3000:] for w in workers),
                )
            )
            settle(
                lambda: (
                    counts(
                        new_primary,
                        "SELECT count(*) FROM taskq.tasks WHERE status NOT IN ('SUCCESS')",
                    )[0][0]
                    == 0
                ),
                timeout=90,
                what="every surviving task SUCCESS",
            )
            on_failure.pop_all()
        present = {
            r[0]
            for r in counts(
                new_primary, "SELECT id FROM taskq.tasks WHERE id = ANY(%s)", (acked_ids,)
            )
        }
        lost = [(n, i, t) for n, i, t in producer.acked if i not in present]
        [(duplicates,)] = counts(
            new_primary,
            "SELECT count(*) FROM (SELECT n FROM effects GROUP BY n HAVING count(*) > 1) d",
        )
        [(missing_effects,)] = counts(
            new_primary,
            "SELECT count(*) FROM taskq.tasks t WHERE t.task_type = 'fo.effect' "
            "AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id)",
        )
        [(charged,)] = counts(new_primary, "SELECT count(*) FROM taskq.tasks WHERE retry_count > 0")
        alive = all(w.proc.poll() is None for w in workers)
        for w in workers:
            if w.proc.poll() is not None:
                print(f"worker exited {w.proc.returncode}:", w.log_path.read_text()[-2000:])

        # The old primary comes back as a standby of the new one: nobody writes there, and
        # work goes on on the new primary.
        pair.rejoin_old_primary()
        with psycopg.connect(multi) as conn:
            after = [app.enqueue(conn, "fo.quick", {"n": -k}) for k in range(20)]
            conn.commit()
        wait_until_sync(
            lambda: (
                counts(
                    new_primary,
                    "SELECT count(*) FROM taskq.tasks WHERE id = ANY(%s) AND status = 'SUCCESS'",
                    (after,),
                )[0][0]
                == 20
            ),
            timeout=30,
            what="tasks after the old primary rejoined",
        )
        [(on_old,)] = counts(
            pair.node_dsn(pair.a),
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'taskq-%%'",
        )
        lost_window = (max(t for _, _, t in lost) - min(t for _, _, t in lost)) if lost else 0.0
        figures = {
            "replication": "synchronous" if synchronous else f"asynchronous (+{lag_seconds}s)",
            "acknowledged": len(producer.acked),
            "lost": len(lost),
            "lost_acked_before_crash_s": round(crashed_at - min(t for _, _, t in lost), 3)
            if lost
            else 0.0,
            "lost_window_s": round(lost_window, 3),
            "in_doubt": producer.in_doubt,
            "duplicate_effects": duplicates,
            "missing_effects": missing_effects,
            "promotion_to_first_claim_s": round(first_claim, 3),
            "crash_to_promoted_s": round(promoted_at - crashed_at, 3),
            "charged_attempts": charged,
            "workers_alive": alive,
            "connections_on_old_primary": on_old,
        }
        print("failover:", json.dumps(figures))
        return figures


def test_synchronous_failover_loses_nothing(tmp_path: Path) -> None:
    f = run_failover(tmp_path, synchronous=True, lag_seconds=0.0)
    assert f["lost"] == 0
    assert f["duplicate_effects"] == 0
    assert f["missing_effects"] == 0
    assert f["workers_alive"]
    assert f["promotion_to_first_claim_s"] < 10
    assert f["connections_on_old_primary"] == 0


def test_asynchronous_failover_loses_at_most_the_lag_window(tmp_path: Path) -> None:
    f = run_failover(tmp_path, synchronous=False, lag_seconds=0.2)
    # What was lost was acknowledged in the last moments before the crash: the lag window
    # (0.2 s relay delay, plus the time the standby needs to write what it received).
    assert f["lost_acked_before_crash_s"] <= 1.0
    assert f["duplicate_effects"] == 0
    assert f["missing_effects"] == 0
    assert f["workers_alive"]
    assert f["promotion_to_first_claim_s"] < 10
    assert f["connections_on_old_primary"] == 0


def test_operators_read_from_a_standby_and_writes_say_it_is_read_only(tmp_path: Path) -> None:
    with replication.replicated_pair(synchronous=True) as pair:
        primary, standby = pair.node_dsn(pair.a), pair.node_dsn(pair.b)
        assert taskq_cli("migrate", "--dsn", primary).returncode == 0
        with psycopg.connect(primary) as conn:
            done = app.enqueue(conn, "fo.quick", {"n": 1})
            dead = app.enqueue(conn, "fo.quick", {"n": 2})
            conn.execute(
                "UPDATE taskq.tasks SET status = 'DEAD_LETTER', last_error = 'boom' WHERE id = %s",
                (dead,),
            )
            conn.commit()
        # Synchronous replication: the rows are on the standby once the commit returned.
        stats = taskq_cli("stats", "--json", "--dsn", standby)
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)["standby"] is True
        on_primary = json.loads(taskq_cli("stats", "--json", "--dsn", primary).stdout)
        assert [r["application_name"] for r in on_primary["replication"]] == [pair.b.name]
        assert on_primary["replication"][0]["sync_state"] == "sync"
        human = taskq_cli("stats", "--dsn", primary)
        assert f"standby {pair.b.name} (sync, streaming): replay lag" in human.stdout
        listed = taskq_cli("dlq", "list", "--dsn", standby)
        assert listed.returncode == 0 and str(dead) in listed.stdout, listed.stderr
        assert taskq_cli("dlq", "show", str(dead), "--dsn", standby).returncode == 0
        assert taskq_cli("show", str(done), "--dsn", standby).returncode == 0
        watched = taskq_cli("watch", str(done), "--timeout", "1", "--dsn", standby)
        # No LISTEN on a standby: watch polls the row, and gives up at the timeout as usual.
        assert f"#{done} PENDING" in watched.stdout, watched.stderr
        assert "still PENDING after" in watched.stderr
        refused = taskq_cli("dlq", "requeue", str(dead), "--dsn", standby)
        assert refused.returncode == 1
        assert refused.stderr.strip().startswith("taskq: error: the server is read-only")
        assert len(refused.stderr.strip().splitlines()) == 1
