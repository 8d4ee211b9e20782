"""Everything PostgreSQL would refuse is refused before anything is sent (taskq.InvalidTask),
so a bad task never aborts the caller's business transaction with a raw driver error."""

from __future__ import annotations

from typing import Any

import pytest

import taskq
from taskq.model import MAX_KEY_LENGTH

NOT_A_CONNECTION = object()  # validation passes -> TypeError about the connection instead


def _enqueue(payload: Any = None, **options: Any) -> None:
    taskq.App(dsn="unused").enqueue(NOT_A_CONNECTION, "sms.notify", payload, **options)  # type: ignore[call-overload]


@pytest.mark.parametrize("field", ["biz_id", "unique_key", "trace_id", "ordering_key"])
def test_nul_byte_in_a_key_is_refused(field: str) -> None:
    with pytest.raises(taskq.InvalidTask, match="NUL"):
        _enqueue({}, **{field: "order\x0042"})


@pytest.mark.parametrize("field", ["biz_id", "unique_key", "trace_id", "ordering_key"])
def test_lone_surrogate_in_a_key_is_refused(field: str) -> None:
    with pytest.raises(taskq.InvalidTask, match="surrogate"):
        _enqueue({}, **{field: "order-\ud800"})


@pytest.mark.parametrize(
    "payload",
    [
        {"text": "a\x00b"},
        {"a\x00": 1},
        ["ok", ["deep", {"x": "\udc00"}]],
        {"half": "\ud83d"},
    ],
)
def test_payload_postgres_cannot_store_is_refused(payload: Any) -> None:
    with pytest.raises(taskq.PayloadError):
        _enqueue(payload)


@pytest.mark.parametrize(
    "payload", [{"emoji": "\U0001f600"}, {"escaped": "\\u0000 is text here"}, {"k": "ü"}]
)
def test_valid_unicode_that_looks_suspicious_passes(payload: Any) -> None:
    with pytest.raises(TypeError, match="connection"):
        _enqueue(payload)


@pytest.mark.parametrize("delay", [float("nan"), float("inf"), -1.0, True])
def test_bad_delay_is_refused(delay: float) -> None:
    with pytest.raises(taskq.InvalidTask, match="delay"):
        _enqueue({}, delay=delay)


@pytest.mark.parametrize("field", ["biz_id", "unique_key", "ordering_key"])
def test_keys_over_the_limit_are_refused(field: str) -> None:
    with pytest.raises(taskq.InvalidTask, match="limit"):
        _enqueue({}, **{field: "k" * (MAX_KEY_LENGTH + 1)})
    with pytest.raises(TypeError, match="connection"):
        _enqueue({}, **{field: "k" * MAX_KEY_LENGTH})


def test_trace_id_over_64_characters_is_refused() -> None:
    with pytest.raises(taskq.InvalidTask, match="trace_id"):
        _enqueue({}, trace_id="t" * 65)
    with pytest.raises(TypeError, match="connection"):
        _enqueue({}, trace_id="t" * 64)


def test_enqueue_many_validates_every_item_first() -> None:
    app = taskq.App(dsn="unused")
    with pytest.raises(taskq.InvalidTask, match="NUL"):
        app.enqueue_many(
            NOT_A_CONNECTION,  # type: ignore[call-overload]
            [{"task_type": "a"}, {"task_type": "a", "biz_id": "x\x00"}],
        )


def test_surrogate_in_a_task_type_is_refused() -> None:
    with pytest.raises(taskq.InvalidTask):
        taskq.App(dsn="unused").enqueue(NOT_A_CONNECTION, "sms.\udc80", {})  # type: ignore[call-overload]


@pytest.mark.parametrize("task_type", [["a"], {"a": 1}, 5, None])
def test_a_task_type_that_is_not_a_string_is_refused_in_bulk_too(task_type: Any) -> None:
    app = taskq.App(dsn="unused")
    for items in ([{"task_type": task_type}], [{"task_type": "ok"}, {"task_type": task_type}]):
        with pytest.raises(taskq.InvalidTask, match="must be a string"):
            app.enqueue_many(NOT_A_CONNECTION, items)  # type: ignore[call-overload]
    with pytest.raises(taskq.InvalidTask, match="must be a string"):
        app.enqueue(NOT_A_CONNECTION, task_type, {})  # type: ignore[call-overload]
