"""Who may use the dashboard, and how a page proves a form came from it.

The model, in the order a request meets it:

* **Binding.** Without ``--auth-token`` the dashboard only listens on loopback, and then only
  answers requests whose ``Host`` is a loopback name: a web page the operator happens to visit
  cannot re-point its own domain at 127.0.0.1 (DNS rebinding) and read the dashboard as itself.
* **Token.** With a token every request must carry it: ``Authorization: Bearer TOKEN`` (scripts)
  or the session cookie the login form sets (HttpOnly, SameSite=Strict, Secure, 12 h). The
  cookie is ``issued.nonce.mac``, an HMAC under a per-process secret: the server keeps no
  session table, and a restart logs everyone out.
* **CSRF.** Every state change is a POST (never a GET) whose form carries ``csrf``, an HMAC of
  the session under the same secret. Another site can make the browser *send* a POST, but
  cannot *read* a page to learn the token. A Bearer request needs none: a browser never adds
  that header on its own, so the header is itself the proof.
* **Read-only.** ``--read-only`` refuses every POST but logging in and out, and the pages leave
  the action forms out.
* **Headers.** A Content-Security-Policy that allows scripts and styles only from the
  dashboard's own files (no inline script could run even if escaping failed), no framing, no
  referrer, no sniffing, no caching of pages.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import os
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskq.errors import ConfigError

SESSION_COOKIE = "taskq_session"
SESSION_SECONDS = 12 * 3600
MIN_TOKEN_LENGTH = 32
MIN_TOKEN_BITS = 80
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cross-origin-opener-policy": "same-origin",
}

# Paths anyone may fetch: the login form and the dashboard's own CSS/JS (no data in them).
PUBLIC_PREFIXES = ("/login", "/static/")
# Every form but the payload editor is a few fields: a login, a note, a list of ids.
SMALL_BODY_BYTES = 256 * 1024
# POSTs that change nothing in the queue, so --read-only still allows them.
SESSION_PATHS = ("/login", "/logout")


def is_loopback(host: str) -> bool:
    """True for a name or address that only this machine can reach."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_bits(token: str) -> float:
    """A rough estimate of a token's entropy: its length times the Shannon entropy of its own
    character frequencies. Catches ``aaaa…`` (0 bits) and ``abab…`` (1 bit a character); a
    random hex or base64 token of 32 characters scores 110-190."""
    n = len(token)
    if not n:
        return 0.0
    return -n * sum(c / n * math.log2(c / n) for c in Counter(token).values())


def check_token(token: str) -> None:
    if len(token) < MIN_TOKEN_LENGTH or token_bits(token) < MIN_TOKEN_BITS:
        raise ConfigError(
            f"the dashboard token must be at least {MIN_TOKEN_LENGTH} random characters "
            "(e.g. openssl rand -hex 24), or let --auth-token-file generate one"
        )


def token_from_file(path: Path) -> tuple[str, bool]:
    """The token stored in ``path``; a missing file is created (mode 0600) with a new random
    token. Returns (token, generated)."""
    try:
        return path.read_text(encoding="utf-8").strip(), False
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(token + "\n")
    except FileExistsError:  # another process created it first: use theirs
        return path.read_text(encoding="utf-8").strip(), False
    except OSError as exc:
        raise ConfigError(f"cannot write the token file {path}: {exc.strerror or exc}") from None
    return token, True


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve an unauthenticated dashboard beyond this machine, or a guessable token."""
    if token is not None:
        check_token(token)
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without --auth-token "
            "(only loopback addresses may go without one)"
        )


def _host_name(host_header: str) -> str:
    """The name part of a Host header: ``[::1]:8080`` -> ``[::1]``, ``a:80`` -> ``a``."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if ":" in host_header else host_header


@dataclass(frozen=True, slots=True)
class Auth:
    """How this request was authenticated: ``"open"`` (no token configured), ``"bearer"`` or
    ``"session"``; ``sid`` is the session the CSRF token is bound to ("" without one)."""

    how: str
    sid: str = ""


class Keys:
    """The per-process secret and what is derived from it."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._secret = secrets.token_bytes(32)

    def _mac(self, purpose: str, value: str) -> str:
        message = f"{purpose}:{value}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        if self.token is None:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def new_session(self) -> str:
        """A cookie value for a user who just proved they know the token."""
        sid = f"{int(time.time())}.{secrets.token_urlsafe(18)}"
        return f"{sid}.{self._mac('session', sid)}"

    def session_id(self, cookie: str | None) -> str | None:
        """The session id of a cookie we minted that has not expired, else None."""
        if not cookie or cookie.count(".") != 2:
            return None
        issued, nonce, mac = cookie.split(".")
        sid = f"{issued}.{nonce}"
        if not hmac.compare_digest(mac, self._mac("session", sid)):
            return None
        if not issued.isdigit() or time.time() - int(issued) > SESSION_SECONDS:
            return None
        return sid

    def csrf(self, auth: Auth) -> str:
        return self._mac("csrf", auth.sid)

    def csrf_ok(self, auth: Auth, candidate: str | None) -> bool:
        if auth.how == "bearer":
            return True
        return bool(candidate) and hmac.compare_digest(str(candidate), self.csrf(auth))

    def authenticate(self, conn: HTTPConnection) -> Auth | None:
        if self.token is None:
            return Auth("open")
        header = conn.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return Auth("bearer") if self.token_matches(header[7:].strip()) else None
        sid = self.session_id(conn.cookies.get(SESSION_COOKIE))
        return Auth("session", sid) if sid is not None else None


def session_cookie(response: Response, conn: HTTPConnection, value: str, max_age: int) -> None:
    """Set (or, with max_age 0, clear) the session cookie. ``Secure`` whenever the browser will
    keep it: over HTTPS, and on loopback, which browsers treat as a secure context even over
    plain HTTP. A token sent over plain HTTP to another host is readable on the wire anyway;
    put TLS in front (uvicorn honours X-Forwarded-Proto from a local proxy)."""
    host = _host_name(conn.headers.get("host", ""))
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=conn.url.scheme == "https" or is_loopback(host),
    )


def local_path(target: str | None) -> str:
    """Where to go after logging in: only a path on this site (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class BodyTooLarge(Exception):
    """The request body grew past the limit while it was being read."""


class Guard:
    """ASGI middleware in front of every route: security headers on every response, the Host
    check, authentication, the read-only switch and a request size limit. CSRF is checked where
    the form is read (``app.form_of``): reading the body here would consume it.

    The size limit comes first, before any authentication work, and holds while the body
    streams: a declared ``Content-Length`` over the limit is refused at once, and a chunked
    body (no length) is counted as it arrives and cut off at the limit, so no request can make
    the server buffer more than ``max_body_bytes``."""

    def __init__(self, app: ASGIApp, *, keys: Keys, read_only: bool, max_body_bytes: int) -> None:
        self.app = app
        self.keys = keys
        self.read_only = read_only
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send, static=scope["path"].startswith("/static/"))
        conn = HTTPConnection(scope)
        refusal = self._too_large(conn) or self._refusal(conn)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        limit = self._limit(scope["path"])
        try:
            await self.app(scope, self._counted(receive, limit), watched_send)
        except BodyTooLarge:
            if started:
                raise
            await PlainTextResponse("request too large", 413)(scope, receive, send)

    def _limit(self, path: str) -> int:
        """Only the payload editor takes a payload-sized body."""
        if path.endswith("/requeue-edited"):
            return self.max_body_bytes
        return min(SMALL_BODY_BYTES, self.max_body_bytes)

    @staticmethod
    def _counted(receive: Receive, limit: int) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(f"request body over {limit} bytes")
            return message

        return counted

    def _too_large(self, conn: HTTPConnection) -> Response | None:
        length = conn.headers.get("content-length")
        limit = self._limit(conn.url.path)
        if length is not None and (not length.isdigit() or int(length) > limit):
            return PlainTextResponse("request too large", 413)
        return None

    def _refusal(self, conn: HTTPConnection) -> Response | None:
        path, method = conn.url.path, conn.scope["method"]
        if self.keys.token is None and not is_loopback(_host_name(conn.headers.get("host", ""))):
            return PlainTextResponse("this dashboard only answers to a loopback host name", 403)
        auth = self.keys.authenticate(conn)
        if auth is None and not path.startswith(PUBLIC_PREFIXES):
            wants_page = method == "GET" and "text/html" in conn.headers.get("accept", "")
            if wants_page:
                return RedirectResponse("/login?next=" + quote(path, safe="/"), 303)
            return PlainTextResponse(
                "authentication required", 401, headers={"www-authenticate": "Bearer"}
            )
        conn.scope["taskq.auth"] = auth
        if method not in ("GET", "HEAD", "POST"):
            return PlainTextResponse("method not allowed", 405)
        if method == "POST" and self.read_only and path not in SESSION_PATHS:
            return PlainTextResponse("this dashboard is read-only", 403)
        return None


def _with_headers(send: Send, *, static: bool) -> Callable[[Message], Awaitable[None]]:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                headers[name] = value
            if not static:
                headers["cache-control"] = "no-store"
        await send(message)

    return wrapped


def auth_of(conn: HTTPConnection) -> Auth:
    """The Auth the Guard attached (the login page, public, may have none)."""
    found: Any = conn.scope.get("taskq.auth")
    return found if isinstance(found, Auth) else Auth("none")
