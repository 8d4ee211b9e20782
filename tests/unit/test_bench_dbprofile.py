"""The database profile's reading of ``perf script`` output: each sample lands in one statement
by the frames on its stack, and in every part whose frame it holds."""

from __future__ import annotations

from pathlib import Path

from bench.dbprofile import parse_script, summarise

# Three samples as `perf script -F pid,ip,sym` prints them (leaf first): a claim's index scan,
# a completion's index insert, a commit's WAL flush; then one whose stack was cut short.
SCRIPT = """\
 7235
\t          19cd32 btgettuple
\t          1a3108 [unknown]
\t          30d599 plpgsql_exec_function
\t          30d5aa ExecMakeTableFunctionResult
\t          4803ee PortalRun
\t          47dabe PostgresMain
\t           27304 __libc_start_main_impl (inlined)

 7236
\t          19cd40 _bt_doinsert
\t          19cd41 ExecInsertIndexTuples
\t          30d599 plpgsql_exec_function
\t          4803ee PortalRun
\t          47dabe PostgresMain

 7236
\t          19cd50 XLogFlush
\t          19cd51 CommitTransactionCommand
\t          47dabe PostgresMain

 7237
\t          19cd60 heap_form_tuple
\t          19cd61 [unknown]
"""


def test_each_sample_lands_in_one_statement_and_its_parts(tmp_path: Path) -> None:
    stacks = list(parse_script(SCRIPT.splitlines()))
    assert stacks[0][0] == "btgettuple"
    assert "[unknown]" not in stacks[0]
    assert stacks[0][-1] == "__libc_start_main_impl"
    folded = tmp_path / "folded.txt"
    summary = summarise(stacks, folded)
    assert summary["samples"] == 4
    rows = {name: (pct, dict(parts)) for name, pct, parts in summary["statements_pct"]}
    # The completion calls PL/pgSQL too (count_outcome_v1), but not as a table function.
    assert rows["claim"] == (25.0, {"index scans": 25.0})
    assert rows["other statements"] == (25.0, {"index inserts": 25.0})
    assert rows["commit"] == (25.0, {"WAL flush": 25.0})
    assert rows["stack cut short"] == (25.0, {})
    assert rows["between statements"] == (0.0, {})
    lines = folded.read_text().splitlines()
    assert (
        "__libc_start_main_impl;PostgresMain;PortalRun;ExecMakeTableFunctionResult;"
        "plpgsql_exec_function;btgettuple 1"
    ) in lines
    assert "heap_form_tuple 1" in lines
    assert len(lines) == 4
