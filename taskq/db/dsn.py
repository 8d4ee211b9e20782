"""Where the database is: --dsn, else TASKQ_DSN, else the embedded server."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from taskq.db import embedded


def _announce(message: str) -> None:
    print(message, file=sys.stderr)


def resolve_dsn(
    dsn: str | None,
    *,
    announce: Callable[[str], None] = _announce,
    migrate_embedded: bool = True,
) -> str:
    """The DSN to use. Falling back to the embedded server is said out loud, because a
    production process that silently used a local database would be a nasty surprise.

    The embedded server is a development database: its default database is migrated on first
    use (and after an upgrade of taskq), so a first worker just works. A real DSN is never
    migrated implicitly: that is ``taskq migrate``'s job, run when the operator decides."""
    if dsn:
        return dsn
    from_env = os.environ.get("TASKQ_DSN")
    if from_env:
        return from_env
    data_dir = embedded.taskq_home() / "pgdata"
    url = embedded.start_server(data_dir)
    announce(
        f"taskq: no --dsn or TASKQ_DSN; using the embedded PostgreSQL in {data_dir} "
        "(`taskq server url` prints its DSN)"
    )
    if migrate_embedded:
        from taskq.db import migrate  # alembic is slow to import: only when needed

        done = migrate.ensure_at_head(url)
        if done:
            announce(f"taskq: {done} (embedded database)")
    return url
