"""Enqueue from your own code, in your own transaction: ``python enqueue.py Ada``.

The DSN comes from TASKQ_DSN (on the embedded server: ``export TASKQ_DSN="$(taskq server url)"``).
"""

from __future__ import annotations

import os
import sys

import psycopg
from mytasks import greet

with psycopg.connect(os.environ["TASKQ_DSN"]) as conn:  # commits when the block ends
    task_id = greet.enqueue(conn, {"name": sys.argv[1] if len(sys.argv) > 1 else "Ada"})
print(task_id)
