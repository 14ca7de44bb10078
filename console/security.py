"""Who may use the console and how: the bind rule, the token, CSRF, the body limit.

Approving authorizes side effects, so every state-changing request proves two things: who sent
it (the token, or being on loopback without one) and that a console page sent it (its CSRF
token, bound to the process's secret and the caller's identity).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import secrets
from dataclasses import dataclass
from typing import Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadwarden.errors import InvalidInput

SESSION_COOKIE = "tw_console"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
LOCAL_OPERATOR = "local"


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_number(text: str, max_digits: int) -> bool:
    """Whether ``text`` is 1 to ``max_digits`` ASCII digits (``str.isdigit`` also takes "²")."""
    return 0 < len(text) <= max_digits and text.isascii() and text.isdigit()


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token (`InvalidInput` naming the setting)."""
    if token is None and not is_loopback(host):
        raise InvalidInput(
            "console_address",
            "a loopback host (127.0.0.1, ::1, localhost) unless THREADWARDEN_CONSOLE_TOKEN"
            " (or THREADWARDEN_API_TOKEN) is set",
            host or "(every interface)",
        )


Role = Literal["console", "app"]
"""What a caller may do: ``console`` everything; ``app`` (the application token) everything
but resolving an unknown side effect."""


@dataclass(frozen=True)
class Caller:
    """Who sends a request, and what it may do."""

    name: str
    role: Role

    def refusal(self, decision: str) -> str | None:
        """Why this caller may not take ``decision`` (a `threadwarden.console.web.Decision`), or
        None when it may: every role takes every decision but ``resolve``, which authorizes a
        side effect nobody knows ran and is the console token's alone. The HTTP API and the
        console's forms both ask here."""
        if decision == "resolve" and self.role != "console":
            return "resolving an unknown side effect needs the console token"
        return None


class Guard:
    """The console's credentials: an optional console token and an optional application token,
    each with its name, and a per-process secret (CSRF tokens, the login cookie)."""

    def __init__(
        self,
        token: str | None,
        token_name: str,
        *,
        api_token: str | None = None,
        api_token_name: str = "app",
    ) -> None:
        self.token = token
        self.token_name = token_name
        self.api_token = api_token
        self.api_token_name = api_token_name
        self._secret = secrets.token_bytes(32)

    @property
    def required(self) -> bool:
        """Whether requests must carry a token (either is set)."""
        return self.token is not None or self.api_token is not None

    def caller(self, authorization: str | None, cookie: str | None) -> Caller | None:
        """Who sends a request: the console token's name (``console``), the application
        token's (``app``), ``local`` (``console``) when no token is set, or None when a token
        is required and none given matches."""
        if not self.required:
            return Caller(LOCAL_OPERATOR, "console")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer":
            presented = given.strip().encode()
            if self.token is not None and hmac.compare_digest(presented, self.token.encode()):
                return Caller(self.token_name, "console")
            if self.api_token is not None and hmac.compare_digest(
                presented, self.api_token.encode()
            ):
                return Caller(self.api_token_name, "app")
        if (
            cookie is not None
            and self.token is not None
            and hmac.compare_digest(cookie.encode(), self.session_value().encode())
        ):
            return Caller(self.token_name, "console")
        return None

    def session_value(self) -> str:
        """The login cookie's value: derived from the token, never the token itself."""
        assert self.token is not None
        return hmac.new(self.token.encode(), b"threadwarden-console", hashlib.sha256).hexdigest()

    def password_matches(self, given: str) -> bool:
        """Whether the login form's password is the token."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def csrf_token(self, operator: str) -> str:
        """The CSRF token of ``operator``'s pages (stable for the process)."""
        return hmac.new(self._secret, operator.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, operator: str, given: str | None) -> bool:
        """Whether ``given`` is ``operator``'s CSRF token."""
        return given is not None and hmac.compare_digest(
            given.encode(), self.csrf_token(operator).encode()
        )


class HttpMiddleware:
    """An ASGI middleware of the console's HTTP requests (`handle`); other scopes (the
    lifespan's) pass through to ``app`` untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request (calling ``app``, or answering it here)."""
        raise NotImplementedError


class BodyLimit(HttpMiddleware):
    """ASGI middleware: a request body beyond ``limit`` bytes gets 413 and never reaches the
    app (a declared Content-Length is refused before reading; a chunked body when it passes)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        super().__init__(app)
        self.limit = limit

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        as_json = scope["path"].startswith("/v1/")  # the HTTP API's error document
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (
            not is_number(declared.decode("latin-1"), 19) or int(declared) > self.limit
        ):
            await _too_large(send, self.limit, as_json)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except BodyTooLarge:
            await _too_large(send, self.limit, as_json)


class BodyTooLarge(Exception):
    """Raised while reading a chunked body that passed the limit: `BodyLimit` answers 413, or
    a handler that catches it first answers its own 413 (the HTTP API's JSON error)."""


async def _too_large(send: Send, limit: int, as_json: bool) -> None:
    message = f"request body larger than {limit} bytes"
    body = f"{message}\n".encode()
    media = b"text/plain; charset=utf-8"
    if as_json:
        error = {"code": "too_large", "message": message, "field": "body"}
        body, media = json.dumps({"error": error}).encode(), b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", media),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
