"""A one-type claim starts where the session's last full claim of the lane ended
(sql/ddl/0029_claim_floor.sql), so it no longer steps over the dead index entries that claimed
rows leave at the front of the range; what that may delay is bounded: higher priorities never
wait, a row behind the floor is claimed once the lane after it runs short or the floor is a
second old."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from taskq.db import migrate
from taskq.db.sqlfiles import query
from tests import factories
from tests.support import nested_plans

SLOT = (
    "SELECT 'taskq.claim_floor_'"
    " || (hashtext(%s || E'\\n' || %s || E'\\n' || 'PENDING') & 2147483647)"
)


def _params(limit: int, task_types: list[str] | None = None) -> dict[str, Any]:
    types = task_types or ["t"]
    return {
        "queue": "default",
        "task_types": types,
        "max_retry_counts": [5] * len(types),
        "timeouts": [60] * len(types),
        "limit": limit,
        "worker_id": "w",
        "retries_only": False,
        "probe": False,
        "isolated": False,
    }


def claim(
    conn: psycopg.Connection[Any], limit: int, task_types: list[str] | None = None
) -> list[int]:
    return [r[0] for r in conn.execute(query("claim_batch"), _params(limit, task_types))]


def floor(conn: psycopg.Connection[Any], task_type: str = "t") -> str | None:
    row = conn.execute(SLOT, ("default", task_type)).fetchone()
    assert row is not None
    found = conn.execute("SELECT current_setting(%s, true)", (row[0],)).fetchone()
    assert found is not None
    return found[0]


def age_floor(conn: psycopg.Connection[Any], seconds: float) -> str:
    """Set the floor's last scan from the start ``seconds`` before now, by the database clock;
    returns that time as the floor stores it."""
    value = floor(conn)
    assert value
    parts = value.split("\n")
    now = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
    assert now is not None
    parts[3] = str(now[0] - seconds)
    slot = conn.execute(SLOT, ("default", "t")).fetchone()
    assert slot is not None
    conn.execute("SELECT set_config(%s, %s, false)", (slot[0], "\n".join(parts)))
    return parts[3]


def backlog(conn: psycopg.Connection[Any], n: int, **columns: Any) -> list[int]:
    """``n`` due rows of type 't', oldest first, so claim order is id order."""
    return [factories.task(conn, age=3600 - i, **columns) for i in range(n)]


def release(conn: psycopg.Connection[Any], task_id: int) -> None:
    """Back to PENDING with its old key: behind a floor that has passed it."""
    conn.execute(
        "UPDATE taskq.tasks SET status = 'PENDING', effective_id = NULL, worker_id = NULL,"
        " started_at = NULL WHERE id = %s",
        (task_id,),
    )


def test_a_full_claim_sets_the_floor_and_the_next_starts_after_it(
    conn: psycopg.Connection[Any],
) -> None:
    ids = backlog(conn, 30)
    assert claim(conn, 10) == ids[:10]
    value = floor(conn)
    assert value is not None and value.split("\n")[-1] == str(ids[9])
    release(conn, ids[2])  # behind the floor
    assert claim(conn, 10) == ids[10:20]  # from the floor: the released row waits
    assert floor(conn) is not None and floor(conn).split("\n")[-1] == str(ids[19])  # type: ignore[union-attr]


def _index_buffers(plans: list[dict[str, Any]]) -> int:
    """Buffers the scans of the runnable index touched (its pages and the rows' heap pages)."""

    def walk(node: dict[str, Any]) -> int:
        here = 0
        if node.get("Index Name") == "tasks_runnable_by_type_idx":
            here = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
        return here + sum(walk(child) for child in node.get("Plans", []))

    return sum(walk(p["Plan"]) for p in plans)


def test_the_floor_started_scan_does_not_step_over_the_claimed_rows(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    """What it is for: the entries of the 10,000 rows the first claim took (dead to every scan,
    still in the index until VACUUM) are stepped over by a claim from the front, even once
    scans have marked them dead, and not by one from the floor."""
    conn.execute(
        "INSERT INTO taskq.tasks (task_type, scheduled_at)"
        " SELECT 't', now() - interval '1 hour' FROM generate_series(1, 10400)"
    )
    assert len(claim(conn, 10_000)) == 10_000
    with psycopg.connect(dsn, autocommit=True) as first:  # from the front: marks them dead
        assert len(claim(first, 100)) == 100
    with psycopg.connect(dsn, autocommit=True) as fresh:  # from the front again
        fresh.execute("LOAD 'auto_explain'")
        fresh.execute("SET auto_explain.log_buffers = on")
        from_front = _index_buffers(nested_plans(fresh, query("claim_batch"), _params(100)))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_buffers = on")
    # A floor is used for a second after the last scan from the start, and the steps above may
    # take that long on a loaded machine: the floor's clock is restarted after the claim right
    # before the measured one, so the measured claim starts where that claim left the floor.
    assert len(claim(conn, 100)) == 100
    age_floor(conn, 0)
    from_floor = _index_buffers(nested_plans(conn, query("claim_batch"), _params(100)))
    done = conn.execute("SELECT count(*) FROM taskq.tasks WHERE status = 'PROCESSING'").fetchone()
    assert done == (10_400,)
    assert from_floor * 3 < from_front, (from_floor, from_front)


def test_a_short_lane_after_the_floor_scans_from_the_start(
    conn: psycopg.Connection[Any],
) -> None:
    ids = backlog(conn, 15)
    assert claim(conn, 10) == ids[:10]
    release(conn, ids[3])
    # Five rows after the floor, ten asked: the rest comes from the start, the released row.
    assert sorted(claim(conn, 10)) == sorted([*ids[10:15], ids[3]])
    assert floor(conn) == ""  # a short claim forgets the floor


def test_a_floor_a_second_old_is_not_used(conn: psycopg.Connection[Any]) -> None:
    ids = backlog(conn, 30)
    claim(conn, 10)
    release(conn, ids[2])
    aged = age_floor(conn, 1.5)  # the last scan from the start: 1.5 s ago
    assert sorted(claim(conn, 10)) == sorted([ids[2], *ids[10:19]])
    # ... and that scan from the start restarts the clock
    fresh = floor(conn)
    assert fresh is not None and float(fresh.split("\n")[3]) > float(aged) + 1


def test_higher_priorities_never_wait_behind_the_floor(conn: psycopg.Connection[Any]) -> None:
    ids = backlog(conn, 30)
    claim(conn, 10)
    urgent = factories.task(conn, priority=5)
    low = factories.task(conn, priority=-5, age=7200)
    # Which rows, not their order: a claim returns its rows in the order its plan reads them.
    assert sorted(claim(conn, 10)) == sorted([urgent, *ids[10:19]])
    assert sorted(claim(conn, 12)) == sorted([*ids[19:30], low])


def test_the_floor_is_the_sessions_and_the_lanes_own(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    ids = backlog(conn, 30)
    other = backlog(conn, 5, task_type="u")
    claim(conn, 10)
    release(conn, ids[1])
    with psycopg.connect(dsn, autocommit=True) as second:  # no floor in another session
        assert claim(second, 1) == [ids[1]]
    assert claim(conn, 5, ["u"]) == other  # another type's lane starts at its front
    # A floor of another lane under this lane's setting (a hash collision) is ignored.
    slot = conn.execute(SLOT, ("default", "t")).fetchone()
    assert slot is not None
    conn.execute(
        "SELECT set_config(%s, concat_ws(E'\\n', 'default', 'u', 'PENDING',"
        " extract(epoch FROM now()), 0, 0, 0), false)",
        (slot[0],),
    )
    release(conn, ids[0])
    assert claim(conn, 1) == [ids[0]]


@pytest.mark.slow
def test_the_downgrade_restores_the_claim_scan_of_0028(empty_dsn: str) -> None:
    definition = "SELECT pg_get_functiondef('taskq.claim_scan_v2'::regproc)"
    helper = "SELECT to_regproc('taskq.lane_floor_set_v1')"
    migrate.upgrade(empty_dsn, "0028")
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        before = c.execute(definition).fetchone()
    migrate.upgrade(empty_dsn, "0029")
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        assert c.execute(definition).fetchone() != before
        assert c.execute(helper).fetchone() != (None,)
    migrate.downgrade(empty_dsn, "0028")
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        assert c.execute(definition).fetchone() == before
        assert c.execute(helper).fetchone() == (None,)
