"""The dashboard's body limit holds while a chunked body streams, before any authentication
work (a 300 MiB chunked POST /login once grew the server to 950 MiB before its 401)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import Message, Receive, Scope, Send

from taskq.dashboard.security import Guard, Keys

CHUNK = 64 * 1024
LIMIT = 4 * 1024 * 1024
TOKEN = "t" * 40


class CountingKeys(Keys):
    def __init__(self) -> None:
        super().__init__(TOKEN)
        self.authentications = 0

    def authenticate(self, conn: Any) -> Any:
        self.authentications += 1
        return super().authenticate(conn)


async def reads_whole_body(scope: Scope, receive: Receive, send: Send) -> None:
    body = await Request(scope, receive).body()
    await PlainTextResponse(f"read {len(body)}", 401)(scope, receive, send)


def _post(path: str, chunks: int, headers: list[tuple[bytes, bytes]]) -> tuple[int, int, int]:
    keys = CountingKeys()
    guard = Guard(reads_whole_body, keys=keys, read_only=False, max_body_bytes=LIMIT)
    pulled = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": pulled < chunks}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "scheme": "http",
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(guard(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, pulled, keys.authentications


def test_chunked_body_is_cut_off_at_the_limit_while_streaming() -> None:
    status, pulled, _ = _post("/login", chunks=300 * 16, headers=[])  # 300 MiB, no length
    assert status == 413
    assert pulled * CHUNK <= LIMIT + CHUNK  # stopped reading at the limit


def test_declared_length_over_the_limit_is_refused_before_authentication() -> None:
    status, pulled, auths = _post(
        "/login", chunks=1, headers=[(b"content-length", str(300 * 1024 * 1024).encode())]
    )
    assert (status, pulled, auths) == (413, 0, 0)


def test_the_payload_editor_may_send_up_to_the_full_limit() -> None:
    bearer = [(b"authorization", f"Bearer {TOKEN}".encode())]
    status, pulled, _ = _post("/tasks/1/requeue-edited", chunks=16, headers=bearer)  # 1 MiB
    assert status == 401 and pulled == 16  # read in full (the stand-in app answers 401)
    status, pulled, _ = _post("/dlq/requeue", chunks=16, headers=bearer)
    assert status == 413 and pulled < 16  # a small form: a small limit
