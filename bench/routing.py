"""What the insert triggers that route and check a row (routing, payload size, names) cost.

Two fresh databases at head on the same server: one as migrated, one with those triggers
disabled and queue defaulting to 'default' (what the table would be without them). The same
inserts run against both, alternating, several rounds; the fastest per-row time of each
(noise only ever adds time) is printed with the difference in percent, then the triggers'
shares of one bulk INSERT as the server measured them.

    python -m bench.routing [--dsn postgresql://root@127.0.0.1:5432/test] [--rounds 7]

Workloads (all into an emptied table, task type registered to queue 'sms' at head):
  sql-single   single-row bare INSERTs naming no queue, one transaction of 2,000
  sql-commit   the same, each autocommitted (what a producer's transaction really pays)
  sql-bulk     one INSERT ... SELECT of 50,000 rows naming no queue
  py-single    app.enqueue of a registered type (names everything: WHEN skips the routing)
  py-bulk      app.enqueue_many of 20,000 items of a registered type (COPY)
  loop-named   20,000 single-row INSERTs naming queue and options, in a server-side loop
               (what the Python API's statement costs the server; WHEN skips the routing)
  loop-bare    the same naming nothing (enters the routing trigger)
  py-foreign   app.enqueue of a type the producer does not register (enters the routing trigger)
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import taskq
from taskq.db import migrate

BASE = "no trigger"  # head, with the routing and checking triggers disabled
CHECKS = ("tasks_route_insert", "tasks_payload_size_insert", "tasks_check_names_insert")
Workload = Callable[[str], float]  # dsn -> seconds per row


def _app(register: bool) -> taskq.App:
    app = taskq.App(dsn="unused")
    if register:

        @app.task("sms.notify", queue="sms", max_retry_count=5, timeout=30)
        def notify(ctx: taskq.TaskContext, payload: Any) -> None: ...

    return app


def _reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE taskq.tasks")
        conn.execute("VACUUM ANALYZE taskq.tasks")


BARE = "INSERT INTO taskq.tasks (task_type, payload) VALUES ('sms.notify', '{\"to\": \"+49\"}')"


def sql_single(dsn: str, n: int = 2000) -> float:
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        for _ in range(n):
            conn.execute(BARE, prepare=True)
        conn.commit()
        return (time.perf_counter() - start) / n


def sql_commit(dsn: str, n: int = 1000) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        for _ in range(n):
            conn.execute(BARE, prepare=True)
        return (time.perf_counter() - start) / n


def sql_bulk(dsn: str, n: int = 50_000) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload) "
            "SELECT 'sms.notify', jsonb_build_object('n', i) FROM generate_series(1, %s) AS i",
            (n,),
        )
        return (time.perf_counter() - start) / n


def _server_loop(dsn: str, statement: str, n: int = 20_000) -> float:
    """Single-row inserts in a server-side loop: no client round trips in the measure."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        start = time.perf_counter()
        conn.execute(
            sql.SQL("DO $loop$ BEGIN FOR i IN 1..{} LOOP {}; END LOOP; END $loop$").format(
                sql.Literal(n), sql.SQL(statement)
            )
        )
        return (time.perf_counter() - start) / n


def loop_named(dsn: str) -> float:
    return _server_loop(
        dsn,
        "INSERT INTO taskq.tasks (task_type, queue, payload, max_retry_count, timeout_seconds)"
        " VALUES ('sms.notify', 'sms', '{\"n\": 1}', 5, 30)",
    )


def loop_bare(dsn: str) -> float:
    return _server_loop(dsn, BARE)


def py_single(dsn: str, n: int = 2000, register: bool = True) -> float:
    app = _app(register)
    # An unregistered type's queue is left NULL for the trigger; without it, name 'default'.
    options: dict[str, Any] = {"queue": "default"} if "_bare_" in dsn else {}
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        for i in range(n):
            app.enqueue(conn, "sms.notify", {"n": i}, **options)
        conn.commit()
        return (time.perf_counter() - start) / n


def py_bulk(dsn: str, n: int = 20_000) -> float:
    app = _app(True)
    items = [{"task_type": "sms.notify", "payload": {"n": i}} for i in range(n)]
    with psycopg.connect(dsn) as conn:
        start = time.perf_counter()
        app.enqueue_many(conn, items)
        conn.commit()
        return (time.perf_counter() - start) / n


def py_foreign(dsn: str) -> float:
    return py_single(dsn, register=False)


def trigger_share(dsn: str, n: int = 50_000) -> str:
    """Each trigger's own time as a share of the statement's (both measured by the
    server in the same run, so machine noise hits both alike)."""
    with psycopg.connect(dsn) as conn:
        plan = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) INSERT INTO taskq.tasks (task_type, payload) "
            "SELECT 'sms.notify', jsonb_build_object('n', i) FROM generate_series(1, %s) AS i",
            (n,),
        ).fetchone()
        conn.rollback()
    assert plan is not None
    report = plan[0][0]
    total = float(report["Execution Time"])
    lines = [f"  statement {total:.1f} ms"]
    for trigger in report.get("Triggers", []):
        share = 100 * float(trigger["Time"]) / total
        lines.append(f"  {trigger['Trigger Name']}: {trigger['Time']:.1f} ms ({share:.1f}%)")
    return "\n".join(lines)


WORKLOADS: dict[str, Workload] = {
    "sql-single": sql_single,
    "sql-commit": sql_commit,
    "sql-bulk": sql_bulk,
    "py-single": py_single,
    "py-bulk": py_bulk,
    "py-foreign": py_foreign,
    "loop-named": loop_named,
    "loop-bare": loop_bare,
}


def _database(admin: str, trigger: bool) -> tuple[str, str]:
    name = f"taskq_bench_routing_{'head' if trigger else 'bare'}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(admin, dbname=name)
    migrate.upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if trigger:
            conn.execute(
                "INSERT INTO taskq.task_types (task_type, queue, max_retry_count, "
                "timeout_seconds) VALUES ('sms.notify', 'sms', 5, 30)"
            )
        else:
            for trigger in CHECKS:
                conn.execute(
                    sql.SQL("ALTER TABLE taskq.tasks DISABLE TRIGGER {}").format(
                        sql.Identifier(trigger)
                    )
                )
            conn.execute("ALTER TABLE taskq.tasks ALTER COLUMN queue SET DEFAULT 'default'")
    return name, dsn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default="postgresql://root@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    made = [_database(args.dsn, trigger=False), _database(args.dsn, trigger=True)]
    try:
        print(f"{'workload':<12} {BASE + ' us/row':>18} {'head us/row':>12} {'delta':>8}")
        for label in args.only:
            work = WORKLOADS[label]
            times: dict[str, list[float]] = {BASE: [], "head": []}
            for _ in range(args.rounds):
                for (_, dsn), key in zip(made, (BASE, "head"), strict=True):
                    _reset(dsn)
                    times[key].append(work(dsn))
            # The minimum: on a shared machine, noise only ever adds time.
            before = min(times[BASE]) * 1e6
            after = min(times["head"]) * 1e6
            delta = 100 * (after / before - 1)
            print(f"{label:<12} {before:>18.2f} {after:>12.2f} {delta:>+7.1f}%")
        _reset(made[1][1])
        print("\nhead, EXPLAIN ANALYZE of a 50,000-row bare INSERT ... SELECT (one run):")
        print(trigger_share(made[1][1]))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for name, _ in made:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


if __name__ == "__main__":
    main()
