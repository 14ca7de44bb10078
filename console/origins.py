"""Which browser origins may call the HTTP API, and how a refused one is told why.

A page on another origin than the console's needs ``THREADWARDEN_API_ALLOWED_ORIGINS`` to name
its origin exactly (scheme, host and port). A refusal is the API's JSON error naming the origin,
what is allowed, and, for a page on a loopback name, that ``127.0.0.1`` and ``localhost`` are
different origins (the usual mistake: the page opened at one, the setting names the other). The
browser shows the page nothing of it (only its developer tools do), so the console also logs one
warning per refused origin. `ApiCors` answers preflights the same way; `Authenticate`
(`threadwarden.console.web`) refuses the requests themselves with `OriginPolicy`.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp

from threadwarden.console.security import is_loopback
from threadwarden.console.web import api_error

logger = logging.getLogger(__name__)

SETTING = "THREADWARDEN_API_ALLOWED_ORIGINS"
LOGGED_ORIGINS = 100
"""Refused origins a console remembers having warned about (past them it warns no more)."""


class OriginPolicy:
    """The origins allowed besides the console's own, and the refusal of any other."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed
        self._warned: set[str] = set()

    def allows(self, origin: str, host: str | None) -> bool:
        """Whether ``origin`` is the console's own (its host is the ``Host`` header) or one
        the setting names."""
        if origin in self.allowed:
            return True
        scheme, _, rest = origin.partition("://")
        return scheme in ("http", "https") and host is not None and rest == host

    def refusal(self, origin: str) -> Response:
        """403 ``forbidden_origin`` naming ``origin`` and what is allowed; the first refusal of
        each origin is logged as a warning."""
        message = self.refused(origin)
        if origin not in self._warned and len(self._warned) < LOGGED_ORIGINS:
            self._warned.add(origin)
            logger.warning("api: %s", message)
        return api_error(403, "forbidden_origin", message, "Origin")

    def refused(self, origin: str) -> str:
        """Why ``origin`` is refused, in one line."""
        shown = origin[:100]
        allowed = ", ".join(self.allowed) if self.allowed else "no other origin (it is unset)"
        message = (
            f"the origin {shown!r} may not call this API: {SETTING} allows {allowed}, besides"
            f" the console's own origin; an origin is scheme, host and port, matched exactly"
        )
        host = urlsplit(shown).hostname if "://" in shown else None
        if host is not None and is_loopback(host):
            message += (
                "; 127.0.0.1 and localhost are different origins: open the page at an allowed"
                f" one or add {shown} to {SETTING}"
            )
        return message


class ApiCors(CORSMiddleware):
    """Starlette's CORS middleware whose refused preflights are the API's JSON errors (its
    own are plain text): another origin 403 ``forbidden_origin`` (`OriginPolicy.refusal`),
    a method or request header it does not grant 400 ``invalid_input`` naming the header."""

    def __init__(self, app: ASGIApp, /, *, policy: OriginPolicy, **options: Any) -> None:
        super().__init__(app, allow_origins=policy.allowed, **options)
        self.policy = policy

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code < 400:
            return answer
        if not self.is_allowed_origin(origin=request_headers["origin"]):
            return self.policy.refusal(request_headers["origin"])
        method = request_headers["access-control-request-method"]
        if method not in self.allow_methods:
            field, expected, got = "Access-Control-Request-Method", self.allow_methods, method
        elif "access-control-request-private-network" in request_headers:
            field, expected, got = "Access-Control-Request-Private-Network", ["none"], "true"
        else:
            field, expected = "Access-Control-Request-Headers", self.allow_headers
            got = request_headers.get("access-control-request-headers", "")
        message = f"{field}: expected {', '.join(expected)}, got {got[:200]!r}"
        return api_error(400, "invalid_input", message, field)
