"""The ``taskq`` command: thin click commands over the operator API (``taskq.ops``)."""

from __future__ import annotations

# Importing the command modules registers their commands on the group.
from taskq.cli import control, dashboard, limits, ops, server  # noqa: F401
from taskq.cli.main import cli, main

__all__ = ["cli", "main"]
