"""``taskq dashboard``: the operator's web page (Starlette, server-rendered, no front-end build).

``create_app(DashboardSettings(dsn=...))`` is an ASGI app; ``taskq dashboard`` serves it with
uvicorn. See ``security`` for who may use it and ``app`` for the pages.
"""

from __future__ import annotations

from taskq.dashboard.app import DashboardSettings, create_app

__all__ = ["DashboardSettings", "create_app"]
