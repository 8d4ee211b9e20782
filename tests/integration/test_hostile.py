"""Producers control task types, biz_ids, errors and payloads: no human output of the CLI may
let them restyle it (rich markup) or drive the operator's terminal (escape sequences)."""

from __future__ import annotations

import json

import psycopg

from tests.support import taskq_cli

MARKUP_TYPE = "[bold red]evil[/] [link=https://evil.example]click[/link]"
ESC = "\x1b"
HOSTILE = f"{ESC}]0;pwned{ESC}\\{ESC}[2J{ESC}[31m[red]x[/red]\x9b31m\u202e"


def _seed(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        dead = conn.execute(
            "INSERT INTO taskq.tasks (task_type, queue, biz_id, payload, status, last_error,"
            " finished_at, max_retry_count) VALUES (%s, %s, %s, %s, 'DEAD_LETTER', %s, now(), 0)"
            " RETURNING id",
            (
                MARKUP_TYPE,
                "[blink]q[/blink]",
                HOSTILE,
                json.dumps({"text": HOSTILE}),
                f"RuntimeError: {HOSTILE}\n  line 2 {HOSTILE}",
            ),
        ).fetchone()
        live = conn.execute(
            "INSERT INTO taskq.tasks (task_type, biz_id, payload) VALUES (%s, %s, %s) RETURNING id",
            (MARKUP_TYPE, HOSTILE, json.dumps({HOSTILE: HOSTILE})),
        ).fetchone()
    assert dead and live
    return dead[0], live[0]


def test_no_cli_output_renders_producer_markup_or_escapes(dsn: str) -> None:
    dead, live = _seed(dsn)
    for args in (
        ["stats"],
        ["dlq", "list"],
        ["dlq", "show", str(dead)],
        ["show", str(live)],
        ["show", str(dead)],
    ):
        result = taskq_cli(*args, "--dsn", dsn, env={"COLUMNS": "400"})
        assert result.returncode == 0, (args, result.stderr)
        for stream in (result.stdout, result.stderr):
            assert ESC not in stream, (args, stream)
            assert "\x9b" not in stream and "\u202e" not in stream, (args, stream)
        # The markup is shown as the literal text the producer wrote, not applied.
        assert "[bold red]evil[/]" in result.stdout or "[bold red]evil" in result.stdout, args
    shown = taskq_cli("dlq", "show", str(dead), "--dsn", dsn).stdout
    assert "\\x1b]0;pwned" in shown and "[red]x[/red]" in shown


def test_show_cuts_a_big_payload_short_unless_full(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO taskq.tasks (task_type, payload) "
            "SELECT 'big', jsonb_build_object('blob', repeat('x', 2000000)) RETURNING id"
        ).fetchone()
    assert row
    short = taskq_cli("show", str(row[0]), "--dsn", dsn)
    assert short.returncode == 0, short.stderr
    assert len(short.stdout) < 40_000 and "--full" in short.stdout
    full = taskq_cli("show", str(row[0]), "--full", "--dsn", dsn)
    assert full.returncode == 0 and "x" * 2_000_000 in full.stdout
