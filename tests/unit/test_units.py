"""Pure unit tests: no database."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

import pytest

import taskq
from taskq import outcome
from taskq.db import sqlfiles
from taskq.errors import ConfigError, InvalidTask, PayloadError
from taskq.model import check_name, encode_payload
from taskq.outcome import MAX_ERROR_CHARS, describe
from taskq.worker.notifier import parse_tasks_payload
from taskq.worker.worker import parse_queues

ROOT = Path(__file__).resolve().parents[2]


def test_every_query_is_used_and_every_used_query_exists() -> None:
    modules = (ROOT / "taskq" / "db" / "store").glob("*.py")
    store = "\n".join(p.read_text() for p in modules if p.stem != "__init__")
    used = set(re.findall(r'(?:query\(|_a?all\(conn, )"([a-z0-9_]+)"', store))
    used |= set(re.findall(r'"([a-z0-9_]+_batch)"', store))
    assert used <= sqlfiles.query_names(), used - sqlfiles.query_names()
    unused = {name for name in sqlfiles.query_names() if f'"{name}"' not in store}
    assert not unused, f"queries nobody runs: {sorted(unused)}"


def test_only_store_executes_named_sql() -> None:
    for path in (ROOT / "taskq").rglob("*.py"):
        if path.parent.name == "store" or path.name in ("store.py", "sqlfiles.py"):
            continue
        assert 'query("' not in path.read_text(), path.name


@pytest.mark.parametrize(
    "bad",
    ["", " sms", "sms ", "a" * 201, "sms\nnotify", "tab\there", "nul\x00", "del\x7f"],
)
def test_bad_names_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidTask):
        check_name("task type", bad)


def test_good_names_pass() -> None:
    for good in ("sms.notify", "a" * 200, "报表.生成", "queue-1:high"):
        assert check_name("queue", good) == good


def test_payload_must_be_json_and_small_enough() -> None:
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        encode_payload({"when": object()}, 1000)
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        encode_payload({"x": float("nan")}, 1000)
    with pytest.raises(PayloadError, match="limit is 10 bytes"):
        encode_payload({"x": "0123456789"}, 10)
    assert encode_payload({"a": [1, 2]}, 100) == '{"a":[1,2]}'


def test_parse_queues() -> None:
    assert parse_queues("sms=8, sync=32,default") == {"sms": 8, "sync": 32, "default": 10}
    for bad in ("sms=0", "sms=x", "=3", "", "a=1,a=2"):
        with pytest.raises(ConfigError):
            parse_queues(bad)


def test_notify_payload_parsing() -> None:
    assert parse_tasks_payload('["sms","default"]') == ["sms", "default"]
    assert parse_tasks_payload("*") is None
    assert parse_tasks_payload("garbage") is None


def test_error_description_is_trimmed_and_nul_free() -> None:
    try:
        raise ValueError("bad\x00value " + "x" * 10_000)
    except ValueError as exc:
        text = describe(exc)
    assert text.startswith("ValueError: bad")
    assert "\x00" not in text
    assert len(text) <= MAX_ERROR_CHARS


def _raise(message: str, *, line: int = 0, cause: BaseException | None = None) -> ValueError:
    """The exception of a ``raise`` at one of two lines, with ``cause`` chained."""
    try:
        if line == 0:
            raise ValueError(message) from cause
        raise ValueError(message) from cause
    except ValueError as exc:
        return exc


def test_an_error_is_described_as_traceback_prints_it_also_when_seen_before() -> None:
    """``describe`` keeps the text of each exception shape (type, message, frames, chain) for
    the next failure of that shape: a storm formats its traceback once. Whatever differs in
    the printed traceback must give a different text."""
    first = describe(_raise("boom"))
    assert first.startswith("ValueError: boom\nTraceback")
    assert describe(_raise("boom")) == first  # the same shape: the kept text
    texts = {
        first,
        describe(_raise("bang")),  # another message
        describe(_raise("boom", line=1)),  # another line
        describe(_raise("boom", cause=KeyError("k"))),  # a cause
        describe(_raise("boom", cause=_raise("inner"))),  # a cause with its own frames
    }
    assert len(texts) == 5
    for exc in (_raise("boom", line=1), _raise("boom", cause=_raise("inner"))):
        message = str(exc)
        expected = f"ValueError: {message}\n" + "".join(traceback.format_exception(exc)[-12:])
        assert describe(exc) == expected  # kept or not, what traceback prints
    assert "KeyError: 'k'" in describe(_raise("boom", cause=KeyError("k")))


def test_the_kept_descriptions_are_bounded() -> None:
    for i in range(3 * outcome._DESCRIBED_MAX):
        describe(_raise(f"order {i} failed"))
    assert len(outcome._DESCRIBED) <= outcome._DESCRIBED_MAX
    assert describe(_raise("order 1 failed")).startswith("ValueError: order 1 failed\n")


def test_registering_twice_or_badly_is_refused() -> None:
    app = taskq.App(dsn="postgresql://unused")

    @app.task("a.b")
    def handler(ctx: taskq.TaskContext, payload: object) -> None: ...

    with pytest.raises(ConfigError, match="registered twice"):
        app.task("a.b")(handler.fn)
    with pytest.raises(InvalidTask):
        app.task("bad\nname")
    with pytest.raises(ConfigError):
        app.task("c", timeout=0)
    assert handler(None, None) is None  # type: ignore[arg-type]  # still callable directly


def test_retry_rejects_negative_delay() -> None:
    with pytest.raises(ValueError):
        taskq.Retry(after=-1)


def test_shipped_systemd_unit_is_consistent() -> None:
    """The unit must be Type=notify and give the drain more time than --shutdown-timeout."""
    unit = (ROOT / "examples" / "systemd" / "taskq-worker.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    assert settings["Type"] == "notify"
    assert "WatchdogSec" in settings
    drain = float(re.search(r"--shutdown-timeout (\d+)", unit).group(1))  # type: ignore[union-attr]
    assert float(settings["TimeoutStopSec"]) > drain


def test_alert_rules_use_metrics_that_exist() -> None:
    from taskq.worker.metrics import Metrics

    registry = Metrics().registry
    names = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    names |= {n + "_total" for n in names}
    rules = (ROOT / "examples" / "prometheus" / "alerts.yml").read_text()
    used = set(re.findall(r"\b(taskq_[a-z_]+)\b", rules))
    assert used and used <= names, used - names


@pytest.mark.parametrize("name", ["claim_batch", "claim_few"])
def test_claim_returns_the_claimed_task_fields_in_order(name: str) -> None:
    """claim_batch builds ClaimedTask positionally from the SELECT list, then held_for."""
    import dataclasses

    from taskq.model import ClaimedTask

    text = sqlfiles.query(name).split("SELECT", 1)[1]
    selected = re.sub(r"\(SELECT .*?\)", "x", text.split("\nFROM taskq.claim_", 1)[0])
    names = [re.split(r"\s+AS\s+|\.", col.strip())[-1] for col in selected.split(",")]
    assert names == [f.name for f in dataclasses.fields(ClaimedTask)] + ["held_for"]


def test_the_grafana_dashboard_uses_metrics_and_labels_that_exist() -> None:
    import json

    from taskq.worker.metrics import Metrics

    labels: dict[str, set[str]] = {}
    for family in Metrics().registry.collect():
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
        for suffix in ("", "_total", "_bucket", "_sum", "_count"):
            labels.setdefault(family.name + suffix, set())
    for metric in Metrics().registry._names_to_collectors.values():
        names = getattr(metric, "_labelnames", ())
        for suffix in ("", "_total", "_bucket", "_sum", "_count"):
            labels.setdefault(metric._name + suffix, set()).update(names)  # type: ignore[attr-defined]
            if suffix == "_bucket":
                labels[metric._name + suffix].add("le")  # type: ignore[attr-defined]
    dashboard = json.loads((ROOT / "examples" / "grafana" / "taskq.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(dashboard["panels"]) >= 6 and exprs
    for expr in exprs:
        used = set(re.findall(r"\b(taskq_[a-z_]+)\b", expr))
        assert used and used <= set(labels), (expr, used - set(labels))
        grouped = set(re.findall(r"by \(([a-z_, ]+)\)", expr))
        for group in grouped:
            for label in (x.strip() for x in group.split(",")):
                assert any(label in labels[m] for m in used), (expr, label)
        for label in re.findall(r"([a-z_]+)=~?\"", expr):
            assert all(label in labels[m] for m in used), (expr, label)
