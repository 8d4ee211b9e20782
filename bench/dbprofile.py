"""Where the database's CPU goes during a drain: Linux ``perf record`` samples the machine
while one taskq worker (1 process, 32 slots, or the first ``--drain-slots`` value) drains a
backlog, and keeps the PostgreSQL backends serving that worker, with DWARF call graphs
(PostgreSQL's packaged binaries keep no frame pointers). perf is not a dependency: pass
``--perf PATH``; it needs root, or ``kernel.perf_event_paranoid`` at 0 or below.

Each sample goes to one statement by the frames on its stack:

* ``claim``: the claim function (``taskq.claim_batch_v3``, PL/pgSQL called as the claim's
  table function);
* ``commit``: committing a statement's transaction (the WAL flush is in it);
* ``other statements``: every other statement, in a drain almost only the batched completion
  (``mark_success_many``);
* ``between statements``: reading the next message, sending results, the protocol;
* ``stack cut short``: none of those, and the stack does not reach ``PostgresMain`` (perf
  copies 16 KB of stack per sample; the claim's nested functions can go deeper).

and, within each, to the parts of the work named in ``PARTS`` (a sample counts in every part
whose frame is on its stack; parts can nest, so they need not add up). The folded stacks go to
``bench/results/profile-db.txt`` for ``flamegraph.pl`` or https://www.speedscope.app.
"""

from __future__ import annotations

import collections
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bench.harness import Measurement
from bench.profile import drain_sampled
from bench.scenarios import Context

# (statement, the frames that put a sample there: all of them on its stack), first match wins.
STATEMENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("commit", ("CommitTransactionCommand",)),
    ("claim", ("ExecMakeTableFunctionResult", "plpgsql_exec_function")),
    ("other statements", ("PortalRun",)),
)
BETWEEN = "between statements"
CUT_SHORT = "stack cut short"

# (part, any of these frames on the stack)
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("index scans", ("btgettuple",)),
    ("index inserts", ("ExecInsertIndexTuples",)),
    ("heap updates", ("heap_update",)),
    ("row locks", ("heap_lock_tuple",)),
    ("executor start", ("standard_ExecutorStart",)),
    ("executor end", ("standard_ExecutorEnd",)),
    ("gen_random_uuid", ("gen_random_uuid",)),
    ("WAL inserts", ("XLogInsert",)),
    ("WAL flush", ("XLogFlush",)),
    ("send", ("secure_write",)),
    ("receive", ("secure_read",)),
)


def parse_script(lines: Iterable[str]) -> Iterator[list[str]]:
    """The stacks of ``perf script -F pid,ip,sym`` output, leaf frame first; frames perf
    could not name (PostgreSQL's static functions) are left out."""
    stack: list[str] | None = None
    for line in lines:
        fields = line.split(None, 1)
        if not fields:
            if stack is not None:
                yield stack
            stack = None
        elif not line[0].isspace() or (len(fields) == 1 and fields[0].isdigit()):
            if stack is not None:
                yield stack
            stack = []  # a sample's header: its pid
        elif stack is not None and len(fields) == 2:
            name = fields[1].strip().removesuffix(" (inlined)")
            if name != "[unknown]":
                stack.append(name)
    if stack is not None:
        yield stack


def statement_of(frames: set[str]) -> str:
    for name, needed in STATEMENTS:
        if all(f in frames for f in needed):
            return name
    return BETWEEN if "PostgresMain" in frames else CUT_SHORT


def summarise(stacks: Iterable[list[str]], folded: Path | None = None) -> dict[str, Any]:
    """Percent of all samples per statement, and per part within each statement."""
    by_statement: collections.Counter[str] = collections.Counter()
    parts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    folded_counts: collections.Counter[str] = collections.Counter()
    total = 0
    for stack in stacks:
        if not stack:
            continue
        total += 1
        frames = set(stack)
        statement = statement_of(frames)
        by_statement[statement] += 1
        for part, any_of in PARTS:
            if any(f in frames for f in any_of):
                parts[statement][part] += 1
        if folded is not None:
            folded_counts[";".join(reversed(stack))] += 1
    if folded is not None:
        folded.write_text("".join(f"{s} {n}\n" for s, n in folded_counts.most_common()))

    def pct(n: int) -> float:
        return round(100 * n / total, 1) if total else 0.0

    order = [name for name, _ in STATEMENTS] + [BETWEEN, CUT_SHORT]
    return {
        "samples": total,
        "statements_pct": [
            [name, pct(by_statement[name]), [[p, pct(n)] for p, n in parts[name].most_common()]]
            for name in sorted(order, key=lambda s: -by_statement[s])
        ],
    }


def _backend_pids(conn: Any) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'taskq-%%' AND application_name <> 'taskq-bench'"
    ).fetchall()
    return sorted(int(r[0]) for r in rows)


def profile_database(ctx: Context, perf: str, results_dir: Path) -> list[Measurement]:
    tasks = 20_000 if ctx.quick else 100_000
    slots = ctx.slots[0] if ctx.slots else 32  # --drain-slots: its first value
    folded = results_dir / "profile-db.txt"
    pids: list[int] = []
    with tempfile.TemporaryDirectory(prefix="taskq-perf-") as tmp:
        data = Path(tmp) / "perf.data"
        # The whole machine, filtered by process afterwards: a backend that closes before perf
        # attaches (a start-up connection) would make `perf record -p` fail.
        timing = drain_sampled(
            ctx,
            tasks=tasks,
            slots=slots,
            name="dbprofile",
            sampler=lambda _pid: [
                perf,
                "record",
                "--all-cpus",
                "--call-graph",
                "dwarf,16384",
                "-F",
                "499",
                "-o",
                str(data),
            ],
            on_drained=lambda conn: pids.extend(_backend_pids(conn)),
        )
        if not data.exists():
            raise RuntimeError(f"perf wrote no samples; see {ctx.log_dir}/perf.log")
        script = subprocess.run(
            [
                perf,
                "script",
                "-i",
                str(data),
                "--pid",
                ",".join(map(str, pids)),
                "-F",
                "pid,ip,sym",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    summary = summarise(parse_script(script.stdout.splitlines()), folded)
    return [
        Measurement(
            "dbprofile",
            f"drain under perf, {tasks:,} tasks, 1 proc x {slots} slots, {len(pids)} backends",
            round(timing.rate_steady, 1),
            "tasks/s",
            {**timing.details(), **summary, "folded_stacks": str(folded)},
            f"{summary['samples']:,} samples of the worker's backends; stacks in {folded.name}",
        )
    ]
