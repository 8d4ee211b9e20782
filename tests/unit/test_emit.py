"""The CLI prints rows one way: emit(rows, columns, as_json)."""

from __future__ import annotations

import json
from typing import Any


def test_emit_prints_json_a_table_or_the_empty_message(capsys: Any) -> None:
    from taskq.cli.main import emit

    rows = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    columns = [("id", lambda r: str(r["id"])), ("name", lambda r: r["name"])]
    emit(rows, columns, True, title="things", empty="none")
    assert json.loads(capsys.readouterr().out) == rows
    emit(rows, columns, True, title="things", empty="none", json_value={"all": rows})
    assert json.loads(capsys.readouterr().out) == {"all": rows}
    emit(rows, columns, False, title="things", empty="none")
    table = capsys.readouterr().out
    assert "things" in table and "name" in table and " b " in table
    emit([], columns, False, title="things", empty="no things")
    assert capsys.readouterr().out.strip() == "no things"
