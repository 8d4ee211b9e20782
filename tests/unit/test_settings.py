"""taskq.settings is the only home of defaults: the CLI's option defaults are the settings'."""

from __future__ import annotations

from typing import Any

import click

from taskq import settings
from taskq.cli import cli
from taskq.settings import ProtectionSettings, WorkerSettings


def _defaults(*path: str) -> dict[str, Any]:
    command: Any = cli
    for name in path:
        command = command.commands[name]
    return {p.name: p.default for p in command.params if isinstance(p, click.Option)}


def test_worker_options_default_to_the_worker_settings() -> None:
    options = _defaults("worker")
    worker, protection = WorkerSettings(), ProtectionSettings()
    assert options["poll_interval"] == worker.poll_interval_seconds
    assert options["shutdown_timeout"] == worker.shutdown_timeout_seconds
    assert options["heartbeat_interval"] == worker.heartbeat_interval_seconds
    assert options["reaper_interval"] == worker.reaper_interval_seconds
    assert options["timeout_grace"] == worker.timeout_grace_seconds
    assert options["metrics_host"] == worker.metrics_host
    assert options["breaker_threshold"] == protection.breaker_threshold
    assert options["breaker_cooldown"] == protection.breaker_cooldown_seconds
    assert options["log_format"] == settings.LOG_FORMAT
    assert options["log_level"] == settings.LOG_LEVEL
    # Options without a default leave the settings' own in place.
    for name in ("max_memory", "metrics_port", "prune_after", "listen_dsn", "queues"):
        assert options[name] is None
    assert worker.max_memory_bytes is None and worker.prune_after_seconds is None


def test_operator_commands_default_to_the_settings() -> None:
    reap = _defaults("reap")
    assert reap["timeout_grace"] == WorkerSettings().timeout_grace_seconds
    assert reap["orphan_after"] == settings.REAP_ORPHAN_AFTER_SECONDS
    assert _defaults("dlq", "list")["limit"] == settings.DLQ_LIST_LIMIT
    dashboard = _defaults("dashboard")
    assert (dashboard["host"], dashboard["port"]) == (
        settings.DASHBOARD_HOST,
        settings.DASHBOARD_PORT,
    )


def test_default_reads_a_dataclass_field() -> None:
    assert settings.default(WorkerSettings, "poll_interval_seconds") == 2.0
    assert settings.default(WorkerSettings, "queues") == {}
    assert settings.default(ProtectionSettings, "level_thresholds") == (2, 3, 4, 6)


def test_breaker_threshold_zero_is_accepted_and_negative_is_not() -> None:
    """0 turns breakers off (see ProtectionSettings.breaker_threshold)."""
    command: Any = cli.commands["worker"]
    option = next(p for p in command.params if p.name == "breaker_threshold")
    assert option.type.convert("0", option, None) == 0
    try:
        option.type.convert("-1", option, None)
    except click.BadParameter:
        pass
    else:
        raise AssertionError("a negative threshold must be refused")
