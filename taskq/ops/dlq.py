"""Dead-letter operations for operators: list, show, requeue, discard; the handling record of
every dead letter (assign, resolve), error groups, and the twice-a-day report.

Requeue and discard are all-or-nothing for explicit ids: when any of them is not a dead letter,
nothing changes and the error names them. A large selection goes in batches of a bounded size
(never one giant statement), each its own short transaction, optionally at a bounded rate
(``rate``) so a replay does not flatten the downstream. Every batch writes its audit rows in the
same statement as the change, and a throttled, batched or interrupted run ends with one summary
row that says how many went.
"""

from __future__ import annotations

import contextlib
import getpass
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from taskq.db import store
from taskq.db.connection import session
from taskq.errors import ConfigError, TaskNotFound
from taskq.model import DeadLetterFilter, DeadLetterState, Resolution

Row = dict[str, Any]

MAX_BATCH = 1000
"""The most dead letters one requeue or discard statement moves."""


def actor() -> str:
    """Who is acting: the OS user and host (recorded in the audit table)."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class Selection:
    """Which dead letters: explicit ids, or a task type, or everything; narrowed (or chosen
    outright) by the filters: business key, error text, age, error group, handling state."""

    ids: tuple[int, ...] | None = None
    task_type: str | None = None
    everything: bool = False
    where: DeadLetterFilter = field(default_factory=DeadLetterFilter)

    def check(self) -> None:
        chosen = sum([bool(self.ids), self.task_type is not None, self.everything])
        if chosen > 1:
            raise ConfigError("give only one of: IDs, --task-type, --all")
        if chosen == 0 and not self.where.narrowed:
            raise ConfigError(
                "say which dead letters: IDs, --task-type T, a filter (--group, --error, "
                "--biz-id, --older-than, --newer-than, --state), or --all"
            )

    def filter(self) -> DeadLetterFilter:
        return replace(
            self.where,
            ids=self.ids or self.where.ids,
            task_type=self.task_type if self.task_type is not None else self.where.task_type,
        )


def list_dead(
    dsn: str,
    *,
    task_type: str | None = None,
    limit: int = 50,
    where: DeadLetterFilter | None = None,
) -> list[Row]:
    with session(dsn) as conn:
        return store.dlq_list(
            conn, task_type=task_type, limit=limit, where=where or DeadLetterFilter()
        )


def show(dsn: str, task_id: int) -> tuple[Row, list[Row]]:
    """The task row and its audit history."""
    with session(dsn) as conn:
        row = store.get_task(conn, task_id)
        if row is None:
            raise TaskNotFound(f"no task with id {task_id}")
        return row, store.audit_for_task(conn, task_id)


def _check_ids(conn: Any, selection: Selection) -> list[Row]:
    found = store.dlq_select(conn, where=selection.filter())
    if selection.ids:
        missing = sorted(set(selection.ids) - {int(r["id"]) for r in found})
        if missing:
            described = []
            for task_id in missing:
                row = store.get_task(conn, task_id)
                described.append(
                    f"{task_id} ({row['status']})" if row else f"{task_id} (no such task)"
                )
            raise TaskNotFound("not a dead letter, nothing changed: " + ", ".join(described))
    return found


def preview(dsn: str, selection: Selection) -> list[Row]:
    """What a requeue, discard or resolve with this selection would touch."""
    selection.check()
    with session(dsn) as conn:
        return _check_ids(conn, selection)


def parse_rate(text: str) -> float:
    """``"50/s"``, ``"600/min"``, ``"20"`` (per second) -> tasks per second."""
    value, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip())
    try:
        count = float(value)
    except ValueError:
        count = math.nan
    if per is None or not math.isfinite(count) or count <= 0:
        raise ConfigError(f"bad rate {text!r}: say e.g. 50/s, 600/min")
    return count / per


@dataclass(slots=True)
class Run:
    """A requeue or discard run: what was asked for, what went, and whether it was stopped."""

    action: str
    planned: int
    done: list[int] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "planned": self.planned,
            "count": len(self.done),
            "ids": self.done,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
        }


Progress = Callable[[int, int], None]
"""Called after every batch with (done so far, planned)."""


@contextlib.contextmanager
def _stop_between_batches() -> Iterator[threading.Event]:
    """In the main thread, SIGINT (Ctrl-C) sets the event instead of raising in the middle of
    a batch: a KeyboardInterrupt between a batch's commit and its count would leave the audit
    summary short of what really moved. Elsewhere (the dashboard's threads) an event nobody
    sets."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _run(
    dsn: str,
    selection: Selection,
    action: str,
    step: Callable[[Any, int], list[int]],
    *,
    rate: float | None,
    batch: int | None,
    note: str | None,
    who: str,
    progress: Progress | None,
    detail: dict[str, Any],
) -> Run:
    selection.check()
    size = max(1, min(MAX_BATCH, batch or MAX_BATCH))
    if rate is not None:
        # About ten statements a second: smooth pacing without a statement per row.
        size = max(1, min(size, math.ceil(rate / 10)))
    run = Run(action=action, planned=0)
    started = time.monotonic()
    try:
        # One connection for the whole run, one short transaction per batch; Ctrl-C stops the
        # run between batches, so every batch committed is a batch counted.
        with _stop_between_batches() as stop, session(dsn) as conn:
            # The all-or-nothing check and the first batch commit together.
            if selection.ids:
                run.planned = len(_check_ids(conn, selection))
            else:
                found = store.dlq_list(conn, limit=1, where=selection.filter())
                run.planned = int(found[0]["matching"]) if found else 0
            moved = step(conn, size) if run.planned else []
            conn.commit()
            run.done.extend(moved)
            if progress is not None:
                progress(len(run.done), run.planned)
            while len(moved) == size and len(run.done) < run.planned:
                if rate is not None:
                    # Pace by the total so far: the k-th row goes no earlier than k / rate.
                    pause = started + len(run.done) / rate - time.monotonic()
                    if pause > 0:
                        stop.wait(pause)
                if stop.is_set():
                    run.interrupted = True
                    break
                moved = step(conn, size)
                conn.commit()
                run.done.extend(moved)
                if progress is not None:
                    progress(len(run.done), run.planned)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        run.seconds = time.monotonic() - started
        # The summary row of a throttled, batched or interrupted run (a one-statement run has
        # its per-task rows, which say it all): written after an interrupt too, on a fresh
        # connection (the interrupted one may be mid-statement), so the audit says how many
        # really went.
        if rate is not None or run.interrupted or len(run.done) > size:
            with session(dsn) as conn:
                store.dlq_run_audit(
                    conn,
                    action=f"{action}_run",
                    actor=who,
                    note=note,
                    detail={
                        **detail,
                        "planned": run.planned,
                        "count": len(run.done),
                        "interrupted": run.interrupted,
                        "rate_per_second": rate,
                        "batch": size,
                        "seconds": round(run.seconds, 3),
                    },
                )
    return run


def replay(
    dsn: str,
    selection: Selection,
    *,
    reset_retries: bool = False,
    note: str | None = None,
    by: str | None = None,
    rate: float | None = None,
    batch: int | None = None,
    progress: Progress | None = None,
) -> Run:
    """DEAD_LETTER -> PENDING for the selection, in batches, at most ``rate`` tasks a second.
    Ctrl-C (KeyboardInterrupt) stops it between or inside a batch: what committed stays
    requeued, the rest stays dead, and the returned run (and the audit) says how many went."""
    who = by or actor()
    where = selection.filter()

    def step(conn: Any, size: int) -> list[int]:
        return store.dlq_requeue(
            conn, reset=reset_retries, actor=who, note=note, where=where, batch=size
        )

    return _run(
        dsn,
        selection,
        "dlq_requeue",
        step,
        rate=rate,
        batch=batch,
        note=note,
        who=who,
        progress=progress,
        detail={"reset_retries": reset_retries, "filter": _described(where)},
    )


def requeue(
    dsn: str,
    selection: Selection,
    *,
    reset_retries: bool = False,
    note: str | None = None,
    by: str | None = None,
    dry_run: bool = False,
) -> list[int]:
    """DEAD_LETTER -> PENDING for the selection; returns the ids moved. ``by`` names the actor
    in the audit row when it is not this OS user (the dashboard acts for someone).

    ``dry_run`` runs the very same statements in one transaction and rolls it back, so its
    answer is the real one: the same ids, or the same refusal (a live task holding a dead
    letter's unique key makes the whole requeue fail, and the dry run says so instead of
    "would requeue")."""
    if not dry_run:
        return replay(dsn, selection, reset_retries=reset_retries, note=note, by=by).done
    selection.check()
    who, where = by or actor(), selection.filter()
    moved: list[int] = []
    with session(dsn) as conn:
        _check_ids(conn, selection)
        while True:
            batch = store.dlq_requeue(
                conn, reset=reset_retries, actor=who, note=note, where=where, batch=MAX_BATCH
            )
            moved += batch
            if len(batch) < MAX_BATCH:
                break
        conn.rollback()  # the audit rows, the handling records and the NOTIFY go with it
    return moved


def discard(
    dsn: str, selection: Selection, *, note: str | None = None, by: str | None = None
) -> list[int]:
    """Delete the selected dead letters (the audit row keeps a copy); returns the ids."""
    who = by or actor()
    where = selection.filter()

    def step(conn: Any, size: int) -> list[int]:
        return store.dlq_discard(conn, actor=who, note=note, where=where, batch=size)

    run = _run(
        dsn,
        selection,
        "dlq_discard",
        step,
        rate=None,
        batch=None,
        note=note,
        who=who,
        progress=None,
        detail={"filter": _described(where)},
    )
    return run.done


def _described(where: DeadLetterFilter) -> dict[str, Any]:
    params = where.params()
    if params["ids"] is not None and len(params["ids"]) > 100:
        params["ids"] = f"{len(params['ids'])} ids"
    return {k: v for k, v in params.items() if v is not None}


# --- the handling record -----------------------------------------------------------------------


def _handle(
    dsn: str,
    selection: Selection,
    *,
    state: DeadLetterState,
    owner: str | None,
    resolution: Resolution | None,
    note: str | None,
    by: str | None,
) -> list[Row]:
    selection.check()
    with session(dsn) as conn:
        ids: Sequence[int] = [int(r["id"]) for r in _check_ids(conn, selection)]
        if not ids:
            return []
        return store.dlq_handle(
            conn,
            ids=ids,
            state=state.value,
            owner=owner,
            resolution=resolution.value if resolution is not None else None,
            note=note,
            by=by or actor(),
        )


def assign(
    dsn: str, selection: Selection, *, to: str, note: str | None = None, by: str | None = None
) -> list[Row]:
    """Someone is on it: state investigating, owner ``to``."""
    if not to.strip():
        raise ConfigError("--to names the person who takes the dead letters")
    return _handle(
        dsn,
        selection,
        state=DeadLetterState.INVESTIGATING,
        owner=to.strip(),
        resolution=None,
        note=note,
        by=by,
    )


def resolve(
    dsn: str,
    selection: Selection,
    *,
    resolution: Resolution,
    note: str | None = None,
    by: str | None = None,
) -> list[Row]:
    """Done: ``fixed`` (the code was fixed, the task triggered by hand) or ``ignored``
    (confirmed meaningless). A requeue resolves as ``requeued`` by itself."""
    if resolution is Resolution.REQUEUED:
        raise ConfigError("a dead letter is resolved as requeued by `taskq dlq requeue` itself")
    return _handle(
        dsn,
        selection,
        state=DeadLetterState.RESOLVED,
        owner=None,
        resolution=resolution,
        note=note,
        by=by,
    )


def groups(dsn: str, where: DeadLetterFilter | None = None) -> list[Row]:
    """Dead letters by error fingerprint: count, first and last seen, types, an example."""
    with session(dsn) as conn:
        return store.dlq_groups(conn, where=where or DeadLetterFilter())


def report(dsn: str, *, since_seconds: float) -> dict[str, Any]:
    """The twice-a-day summary: new dead letters by group, what was resolved and by whom, and
    what is still open."""
    with session(dsn) as conn:
        parts = store.dlq_report(conn, since_seconds=since_seconds)
    return {"since_seconds": since_seconds, **parts}
