"""A reference from pgbench: one task's whole life per pgbench transaction, in SQL only.

The script inserts one task (the statement trigger sends its NOTIFY, as for any producer),
claims one with taskq's ``claim_batch`` statement (``LIMIT 1``) and completes it with
``mark_success_many``: three autocommitted statements, as a producer, a claim and a completion
are in real life. ``-M prepared``, like psycopg after five runs. Clients 1, 2 and 4.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from psycopg import sql

from bench.ceiling import claim_params, statement_params
from bench.harness import Measurement, Skipped, connect, reset_tasks, settle
from taskq.db.sqlfiles import query

PGBENCH_FALLBACK = Path("/usr/lib/postgresql/15/bin/pgbench")
NO_TOKEN = "00000000-0000-0000-0000-000000000000"


def find_pgbench() -> str:
    found = shutil.which("pgbench")
    if found:
        return found
    if PGBENCH_FALLBACK.exists():
        return str(PGBENCH_FALLBACK)
    raise Skipped("pgbench is not installed (Debian: postgresql-client or postgresql-contrib)")


def one_line(statement: str) -> str:
    """pgbench ends a command at a newline: strip the comments, join the lines."""
    return " ".join(re.sub(r"--[^\n]*", "", statement).split())


def script() -> str:
    """insert, claim (taskq's statement, limit 1, the parameters a worker of
    ``bench.apps:app`` sends, as literals), complete (``mark_success_many`` for that row)."""
    claim = query("claim_batch")
    for name, value in claim_params(1, "pgbench").items():
        claim = claim.replace(f"%({name})s", sql.Literal(value).as_string())
    claim = one_line(claim).replace(
        "SELECT c.id,", "SELECT c.id AS claimed_id, c.effective_id AS token, c.id,", 1
    )
    complete = query("mark_success_many")
    # Still ids, tokens and the task_stats outcome?
    statement_params("mark_success_many", {"ids": None, "tokens": None, "outcome": None})
    # In -M prepared a :variable is a parameter: ARRAY[$1]::bigint[] etc.
    complete = complete.replace("%(ids)s", "ARRAY[:claimed_id]")
    complete = complete.replace("%(outcome)s", "'success'")
    complete = one_line(complete.replace("%(tokens)s", "ARRAY[:token]"))
    # The insert also resets the variables: with several clients a claim can find nothing
    # (every runnable row locked by the others' claims), and \aset then assigns nothing, so the
    # completion matches no row instead of completing the previous task twice.
    return (
        "INSERT INTO taskq.tasks (task_type, payload) VALUES ('bench.noop', '{\"i\": 1}')"
        f" RETURNING 0 AS claimed_id, '{NO_TOKEN}' AS token\n\\gset\n"
        f"{claim}\n\\aset\n"
        f"{complete};\n"
    )


def run_pgbench(dsn: str, log_dir: Path, *, quick: bool, say: Any) -> list[Measurement]:
    pgbench = find_pgbench()
    path = log_dir / "taskq-lifecycle.pgbench"
    path.write_text(script())
    seconds = 3 if quick else 10
    out: list[Measurement] = []
    for clients in (1, 2, 4):
        say(f"pgbench: {clients} client(s), {seconds}s")
        with connect(dsn) as conn:
            reset_tasks(conn)
            settle(conn)
        result = subprocess.run(
            [
                pgbench,
                "-n",
                "-M",
                "prepared",
                "-f",
                str(path),
                "-c",
                str(clients),
                "-j",
                str(clients),
                "-T",
                str(seconds),
                dsn,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
        )
        tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
        processed = re.search(r"actually processed: (\d+)", result.stdout)
        if result.returncode != 0 or tps is None or processed is None:
            raise RuntimeError(f"pgbench failed: {(result.stderr or result.stdout)[-500:]}")
        with connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'SUCCESS'), count(*) FROM taskq.tasks"
            ).fetchone()
        assert row is not None
        completed, inserted = int(row[0]), int(row[1])
        transactions = int(processed.group(1))
        # pgbench's tps counts script runs; a run whose claim found nothing completed no task.
        rate = float(tps.group(1)) * completed / max(1, transactions)
        out.append(
            Measurement(
                "pgbench",
                f"insert+claim+complete, 1 task per run, {clients} client(s)",
                round(rate, 1),
                "tasks/s",
                {
                    "clients": clients,
                    "seconds": seconds,
                    "script_runs_per_s": float(tps.group(1)),
                    "script_runs": transactions,
                    "tasks_inserted": inserted,
                    "tasks_completed": completed,
                    "mode": "prepared",
                },
                f"3 autocommitted statements per task; {transactions - completed:,} claims "
                "found nothing",
            )
        )
    return out
