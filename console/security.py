"""Who may use the console and how: the bind rule, the token, CSRF, the body limit.

Approving authorizes side effects, so every state-changing request proves two things: who sent
it (the token, or being on loopback without one) and that a console page sent it (its CSRF
token, bound to the process's secret and the caller's identity).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

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


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond loopback without a token (`InvalidInput` naming the setting)."""
    if token is None and not is_loopback(host):
        raise InvalidInput(
            "console_address",
            "a loopback host (127.0.0.1, ::1, localhost) unless THREADWARDEN_CONSOLE_TOKEN is set",
            host or "(every interface)",
        )


class Guard:
    """The console's credentials: an optional token, its name, and a per-process secret."""

    def __init__(self, token: str | None, token_name: str) -> None:
        self.token = token
        self.token_name = token_name
        self._secret = secrets.token_bytes(32)

    @property
    def required(self) -> bool:
        """Whether requests must carry the token."""
        return self.token is not None

    def session_value(self) -> str:
        """The login cookie's value: derived from the token, never the token itself."""
        assert self.token is not None
        return hmac.new(self.token.encode(), b"threadwarden-console", hashlib.sha256).hexdigest()

    def operator(self, authorization: str | None, cookie: str | None) -> str | None:
        """Who sends a request: the token's name, ``local`` when no token is required, or
        None when the token is required and missing or wrong."""
        if self.token is None:
            return LOCAL_OPERATOR
        if authorization is not None:
            scheme, _, given = authorization.partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), self.token.encode()
            ):
                return self.token_name
        if cookie is not None and hmac.compare_digest(
            cookie.encode(), self.session_value().encode()
        ):
            return self.token_name
        return None

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


class BodyLimit:
    """ASGI middleware: a request body beyond ``limit`` bytes gets 413 and never reaches the
    app (a declared Content-Length is refused before reading; a chunked body when it passes)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await _too_large(send, self.limit)


class _TooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = f"request body larger than {limit} bytes\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
