"""One writer per transition: every statement that moves a row out of PROCESSING is in
sql/queries/finish.sql, executed by taskq/db/store/finish.py, called from
taskq/worker/completer.py only. Found by reading the sources, no database."""

from __future__ import annotations

import re
from pathlib import Path

from taskq.db import sqlfiles

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ROOT / "sql" / "queries"

_BLOCK = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


def _statements() -> dict[str, tuple[str, str]]:
    """name -> (file stem, statement text without comments)."""
    found = {}
    for path in sorted(QUERIES.glob("*.sql")):
        parts = _BLOCK.split(path.read_text())
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            code = "\n".join(line.split("--", 1)[0] for line in body.splitlines())
            found[name] = (path.stem, code)
    return found


def _moves_out_of_processing(code: str) -> bool:
    """An UPDATE of taskq.tasks that sets a status and is guarded by PROCESSING (a claim sets
    PROCESSING and is guarded by PENDING/FAILED), or a DELETE of PROCESSING rows."""
    text = " ".join(code.split())
    updates = re.search(r"UPDATE taskq\.tasks\b", text) and re.search(r"SET status\s*=", text)
    # A claim sets PROCESSING; taskq.cancel_v1 keeps a PROCESSING row PROCESSING (it only
    # requests the abort: the owning worker's completer ends the attempt).
    keeps = r"SET status\s*=\s*(CASE WHEN [\w.]+\s*=\s*'PROCESSING' THEN )?'PROCESSING'"
    guarded = re.search(r"'PROCESSING'", text) and not re.search(keeps, text)
    deletes = re.search(r"DELETE FROM taskq\.tasks\b", text) and "'PROCESSING'" in text
    return bool((updates and guarded) or deletes)


def test_every_move_out_of_processing_is_in_finish_sql() -> None:
    movers = {name for name, (_, code) in _statements().items() if _moves_out_of_processing(code)}
    outside = {
        name: _statements()[name][0] for name in movers if _statements()[name][0] != "finish"
    }
    assert not outside, f"statements leaving PROCESSING outside finish.sql: {outside}"
    # The detector sees the ones we know of (so an empty `outside` means something).
    assert {
        "mark_success_many",
        "mark_failed_many",
        "mark_dead_many",
        "mark_cancelled_many",
        "release_many",
        "reap_attempts",
    } <= movers


_FUNCTION = re.compile(r"(?=\bCREATE (?:OR REPLACE )?FUNCTION\b)")


def test_no_ddl_function_leaves_processing() -> None:
    """SQL functions (callable by any producer) never end an attempt either. Read one function
    at a time (with what precedes the first one): a file may hold a function that moves a dead
    letter to PENDING beside one that checks an attempt is still PROCESSING."""
    for path in sorted((ROOT / "sql" / "ddl").glob("*.sql")):
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        # The status CHECK constraint names every status; it moves nothing.
        code = re.sub(r"CHECK\s*\(\s*status IN \([^)]*\)\s*\)", "", code)
        for chunk in _FUNCTION.split(code):
            assert not _moves_out_of_processing(chunk), (path.name, chunk[:80])


def test_the_ddl_check_sees_a_function_that_leaves_processing() -> None:
    """The per-function reading still catches a mover (so the test above means something)."""
    code = (
        "CREATE FUNCTION a() AS $$ UPDATE taskq.tasks SET status = 'PENDING' $$;\n"
        "CREATE FUNCTION b() AS $$ UPDATE taskq.tasks SET status = 'FAILED' "
        "WHERE status = 'PROCESSING' $$;\n"
    )
    assert [_moves_out_of_processing(c) for c in _FUNCTION.split(code) if c] == [False, True]


def test_finish_statements_run_only_from_store_finish_and_only_for_the_completer() -> None:
    movers = [name for name, (_, code) in _statements().items() if _moves_out_of_processing(code)]
    functions = set()
    for path in (ROOT / "taskq").rglob("*.py"):
        text = path.read_text()
        for name in movers:
            if f'query("{name}")' in text:
                assert path == ROOT / "taskq" / "db" / "store" / "finish.py", (name, path)
    finish_py = (ROOT / "taskq" / "db" / "store" / "finish.py").read_text()
    for match in re.finditer(r"^(?:async )?def ([a-z][a-z0-9_]*)\(", finish_py, re.MULTILINE):
        body = finish_py[match.end() : finish_py.find("\ndef ", match.end())]
        body = body.split("\nasync def ", 1)[0]
        if any(f'query("{name}")' in body for name in movers):
            functions.add(match.group(1))
    assert {
        "mark_success_many",
        "mark_failed_many",
        "mark_cancelled_many",
        "release_many",
        "reap_attempts",
    } <= functions
    completer = ROOT / "taskq" / "worker" / "completer.py"
    for path in (ROOT / "taskq").rglob("*.py"):
        if path == completer or path.parent.name == "store":
            continue
        text = path.read_text()
        for fn in functions:
            assert not re.search(rf"\b{fn}\(", text), f"{path.relative_to(ROOT)} calls {fn}"
    assert all(re.search(rf"store\.{fn}\(", completer.read_text()) for fn in functions)


def test_the_loader_and_the_scan_agree() -> None:
    assert set(_statements()) == sqlfiles.query_names()
