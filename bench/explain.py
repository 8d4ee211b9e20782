"""What one claim and one completion cost the server at the start and at the end of a drain.

A bare drain (the ceiling's loop, ``bench/ceiling.py``: the worker's ``claim_batch`` and
``mark_success_many`` statements with the parameters a worker sends, the completion on its own
connection with the completer's planner settings) runs through a backlog of ``--tasks``. Two
of its batches are explained with ``auto_explain`` (analyze, buffers, WAL, nested statements):
one near the start, after psycopg has prepared both statements and PostgreSQL has settled on
its plan for them (the ``--start``-th batch, 11 by default: five runs before psycopg prepares,
five custom plans before a generic one), and the last full batch. For each it prints every
statement the server ran, the claim function's own statements included, as a plan tree with
each node's rows, time and buffers, and the statement's WAL.

    python bench/explain.py [--dsn SERVER_DSN] [--tasks 100000] [--batch 100]

It creates and drops its own database on the server (``taskq_bench_<run>_explain``);
``auto_explain`` must be loadable (it ships with PostgreSQL). The explained batches run slower
than the others (timing every node), so read the buffers and the WAL, and the times only
against each other.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench.ceiling import claim_params
from bench.harness import Databases, connect, load_noop_backlog, settle
from taskq.db import migrate, store
from taskq.db.connection import set_config
from taskq.db.sqlfiles import query

_EXPLAIN = (
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_wal = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
    "SET auto_explain.log_min_duration = -1",  # on only around the explained batches
)


class Explained:
    """A connection whose statements are explained while ``on`` is set; the plans collect in
    ``plans`` (auto_explain's NOTICEs, JSON)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.plans: list[dict[str, Any]] = []
        conn.execute("LOAD 'auto_explain'")
        for setting in _EXPLAIN:
            conn.execute(setting)  # type: ignore[call-overload]
        conn.add_notice_handler(self._notice)

    def _notice(self, diag: psycopg.errors.Diagnostic) -> None:
        head, _, body = (diag.message_primary or "").partition("plan:")
        if body.strip().startswith("{"):
            plan = json.loads(body)
            # "duration: 1.234 ms": the statement's time, which the JSON does not carry
            plan["Duration"] = float(head.split()[1]) if head.startswith("duration:") else 0.0
            self.plans.append(plan)

    def on(self, enabled: bool) -> None:
        self.conn.execute(
            set_config({"auto_explain.log_min_duration": "0" if enabled else "-1"}, local=False)
        )

    def take(self) -> list[dict[str, Any]]:
        """The plans since the last take, without the ``set_config`` that turned explaining
        off."""
        plans = [p for p in self.plans if "auto_explain" not in p.get("Query Text", "")]
        self.plans.clear()
        return plans


def _node_line(node: dict[str, Any]) -> str:
    what = str(node.get("Node Type"))
    if node.get("Index Name"):
        what += f" using {node['Index Name']}"
    elif node.get("Relation Name"):
        what += f" on {node['Relation Name']}"
    if node.get("Function Name"):
        what += f" of {node['Function Name']}"
    loops = int(node.get("Actual Loops", 1))
    parts = [
        f"rows={node.get('Actual Rows', 0)}" + (f"x{loops}" if loops > 1 else ""),
        f"{float(node.get('Actual Total Time', 0.0)):.3f} ms",
    ]
    hit, read = node.get("Shared Hit Blocks", 0), node.get("Shared Read Blocks", 0)
    dirtied = node.get("Shared Dirtied Blocks", 0)
    parts.append(f"buffers hit={hit}" + (f" read={read}" if read else ""))
    if dirtied:
        parts[-1] += f" dirtied={dirtied}"
    return f"{what}  ({', '.join(parts)})"


def _tree(node: dict[str, Any], depth: int, out: list[str]) -> None:
    out.append("    " + "  " * depth + _node_line(node))
    for child in node.get("Plans", []):
        _tree(child, depth + 1, out)


def render(label: str, plans: list[dict[str, Any]]) -> str:
    """Each statement of one batch, innermost first as the server finished them."""
    out = [label]
    for plan in plans:
        top = plan["Plan"]
        text = " ".join(str(plan.get("Query Text", "")).split())
        wal = (
            f"WAL records={top.get('WAL Records', 0)} fpi={top.get('WAL FPI', 0)}"
            f" bytes={top.get('WAL Bytes', 0)}"
        )
        out.append(f"  {text[:110]}{'...' if len(text) > 110 else ''}")
        out.append(f"    {float(plan.get('Duration', 0.0)):.3f} ms, {wal}")
        _tree(top, 1, out)
    return "\n".join(out)


def drain(dsn: str, tasks: int, batch: int, start: int) -> list[str]:
    """Drain the backlog batch by batch; return the rendered plans of the explained batches."""
    claim, complete = query("claim_batch"), query("mark_success_many")
    params = claim_params(batch, "explain-0")
    reports: list[str] = []
    with connect(dsn) as claiming, connect(dsn) as completing:
        completing.execute(set_config(store.PLANNER_SETTINGS, local=False))  # as the completer's
        explained = (Explained(claiming), Explained(completing))
        done = number = 0
        with (
            claiming.cursor(row_factory=dict_row) as claims,
            completing.cursor() as completions,
        ):
            while done < tasks:
                number += 1
                left = tasks - done
                label = ""
                if number == start:
                    label = f"start: batch {number}, {left:,} runnable before its claim"
                elif batch <= left < 2 * batch and number > start:
                    label = f"end: batch {number}, the last full one, {left:,} runnable"
                if label:
                    for e in explained:
                        e.on(True)
                rows = claims.execute(claim, params).fetchall()
                if not rows:
                    raise RuntimeError(f"the claim found nothing with {left:,} left")
                rows.sort(key=lambda r: r["id"])  # finish.sql takes the ids in order
                completions.execute(
                    complete,
                    {
                        "ids": [r["id"] for r in rows],
                        "tokens": [r["effective_id"] for r in rows],
                        "outcome": "success",
                    },
                ).fetchall()
                done += len(rows)
                if label:
                    for e in explained:
                        e.on(False)
                    claim_plans, completion_plans = (e.take() for e in explained)
                    reports.append(
                        render(f"{label}\n claim ({len(rows)} rows):", claim_plans)
                        + "\n"
                        + render(" completion:", completion_plans)
                    )
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("TASKQ_BENCH_DSN", "postgresql://root@127.0.0.1:5432/test"),
    )
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--start", type=int, default=11, help="the batch explained as the start")
    args = parser.parse_args()
    if args.tasks < (args.start + 2) * args.batch:
        parser.error("--tasks must hold --start + 2 batches")
    databases = Databases(args.dsn)
    try:
        dsn = databases.create("explain")
        migrate.upgrade(dsn)
        with connect(dsn) as conn:
            load_noop_backlog(conn, args.tasks)
            settle(conn)
            version = conn.execute("SHOW server_version").fetchone()
        print(
            f"{args.tasks:,} no-op tasks, batches of {args.batch}, PostgreSQL "
            f"{version[0] if version else '?'}; times include auto_explain's own timing"
        )
        for report in drain(dsn, args.tasks, args.batch, args.start):
            print(report)
    finally:
        databases.drop_all()


if __name__ == "__main__":
    main()
