"""What every console handler shares: the console's state, rendering, JSON, errors, auth."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args
from urllib.parse import parse_qs, quote

import asyncpg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.console.queries import ConsoleQueries
from threadwarden.console.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    SESSION_COOKIE,
    Caller,
    Guard,
    HttpMiddleware,
    is_loopback,
)
from threadwarden.errors import InvalidInput, NotFound, ThreadwardenError, error_code, field_of
from threadwarden.reading.shared import LedgerFeed

if TYPE_CHECKING:
    from threadwarden.console.origins import OriginPolicy

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
FORM = "application/x-www-form-urlencoded"
API = "/v1/"
"""Where the HTTP API for applications lives (`threadwarden.console.api`)."""
Decision = Literal["approve", "deny", "answer", "resolve", "abort"]
"""A decision on a submission, ``POST /submissions/{submission_id}/DECISION`` in the console's
forms and, under `API`, in the HTTP API."""


def decision_routes(endpoint: Callable[[Request], Awaitable[Response]]) -> list[Route]:
    """A route of each `Decision` to ``endpoint``, which tells them apart with `decision_of`."""
    return [
        Route(f"/submissions/{{submission_id}}/{decision}", endpoint, methods=["POST"])
        for decision in get_args(Decision)
    ]


def decision_of(request: Request) -> Decision:
    """The decision a request of `decision_routes` takes (the last part of its path)."""
    return cast(Decision, request.url.path.rpartition("/")[2])


@dataclass
class Console:
    """The console's dependencies, built once by `threadwarden.console.app.create_app`."""

    client: ThreadwardenClient
    queries: ConsoleQueries
    pool: asyncpg.Pool[Any]
    settings: Settings
    guard: Guard
    temporal_ui_url: str | None
    feed: LedgerFeed


def environment() -> Environment:
    """The templates, autoescaped everywhere: record bodies are untrusted agent output."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
    env.filters["when"] = _when
    env.filters["age"] = _age
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")
    return env


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def console_of(request: Request) -> Console:
    """The console the app was built with."""
    console: Console = request.app.state.console
    return console


def operator_of(request: Request) -> str:
    """Who sends the request (set by `Authenticate`)."""
    operator: str = request.scope["operator"]
    return operator


def caller_of(request: Request) -> Caller:
    """Who sends the request and what it may do (set by `Authenticate`)."""
    caller: Caller = request.scope["caller"]
    return caller


def api_error(status: int, code: str, message: str, field: str | None = None) -> Response:
    """The HTTP API's error document: ``{"error": {"code", "message", "field"?}}``."""
    error: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    headers = {"www-authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": error}, status_code=status, headers=headers)


def wants_json(request: Request) -> bool:
    """``?format=json`` (or an ``Accept`` that asks only for JSON)."""
    if request.query_params.get("format") == "json":
        return True
    return request.headers.get("accept", "").strip() == "application/json"


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """A full page, or its main block alone for an htmx fragment request."""
    console = console_of(request)
    operator = operator_of(request)
    page = request.app.state.templates.get_template(template)
    html = page.render(
        request=request,
        operator=operator,
        csrf_token=console.guard.csrf_token(operator),
        csrf_field=CSRF_FIELD,
        login=console.guard.required,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def as_json(value: Any, status_code: int = 200) -> Response:
    """A JSON document in the CLI's shapes (datetimes ISO 8601)."""
    return JSONResponse(json.loads(json.dumps(value, default=str)), status_code=status_code)


class Forbidden(ThreadwardenError):
    """The caller's token may not take this decision (a console form's refusal: 403, naming
    the ``token`` as the console's 401 does)."""

    subject = "token"


def error_status(error: Exception) -> tuple[int, str]:
    """HTTP status and the CLI's stable error ``code`` for a threadwarden error."""
    if isinstance(error, NotFound):
        return 404, "not_found"
    if isinstance(error, InvalidInput):
        return 400, "invalid_input"
    if isinstance(error, Forbidden):
        return 403, "forbidden"
    return 409, error_code(error)


def error_json(error: ThreadwardenError) -> Response:
    """The CLI's ``--json`` error object, with an HTTP status for its kind."""
    status, code = error_status(error)
    field = field_of(error)
    return as_json({"error": str(error), "field": field, "code": code}, status)


def safe_next(value: str | None, default: str) -> str:
    """A same-site path to go on to after a form (never another origin)."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return default


def see_other(path: str) -> Response:
    """The answer to a form that worked: go (back) to the page that shows the change."""
    return RedirectResponse(path, status_code=303)


class Authenticate(HttpMiddleware):
    """ASGI middleware: names the operator of each request, or refuses it.

    Without a token (loopback only) everyone is ``local``. With one, a request needs a bearer
    token (the console's or the application's) or the login cookie; refused: 401 (JSON, events,
    a POST), or the login page. A console POST also needs the operator's CSRF token (form field
    or ``X-CSRF-Token``), else 403. The HTTP API (`API`) needs no CSRF token: it takes only
    ``application/json`` bodies (a cross-origin page cannot send one without a CORS preflight
    it does not get) and refuses a request whose ``Origin`` is another site's unless
    ``origins`` allows it (`OriginPolicy`); its refusals are its JSON errors.
    """

    OPEN = ("/login", "/static/")

    def __init__(self, app: ASGIApp, guard: Guard, origins: OriginPolicy) -> None:
        super().__init__(app)
        self.guard = guard
        self.origins = origins

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        path = request.url.path
        api = path.startswith(API)
        host = request.headers.get("host")
        if not self.guard.required and not is_loopback(_hostname(host)):
            # A tokenless console answers only to loopback names: a page that rebinds its own
            # domain to 127.0.0.1 (DNS rebinding) would otherwise read it, CSRF token included.
            message = "this console answers only to a loopback host name"
            answer = api_error(403, "forbidden_host", message, "Host") if api else None
            await (answer or Response(message + "\n", 403))(scope, receive, send)
            return
        origin = request.headers.get("origin")
        if api and origin is not None and not self.origins.allows(origin, host):
            await self.origins.refusal(origin)(scope, receive, send)
            return
        caller = self.guard.caller(
            request.headers.get("authorization"), request.cookies.get(SESSION_COOKIE)
        )
        if caller is None and not path.startswith(self.OPEN):
            await self._refuse(request)(scope, receive, send)
            return
        scope["caller"] = caller
        scope["operator"] = caller.name if caller else ""
        if request.method == "POST" and path != "/login" and not api:
            body = await request.body()  # within the body limit (`BodyLimit` runs first)
            given = request.headers.get(CSRF_HEADER)
            if given is None and request.headers.get("content-type", "").startswith(FORM):
                given = next(iter(parse_qs(body.decode("latin-1")).get(CSRF_FIELD, [])), None)
            if not self.guard.csrf_valid(scope["operator"], given):
                message = "CSRF token missing or wrong"
                answer = (
                    as_json({"error": message, "field": CSRF_FIELD, "code": "csrf"}, 403)
                    if wants_json(request)
                    else Response(f"{message}\n", 403, media_type="text/plain")
                )
                await answer(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    def _refuse(self, request: Request) -> Response:
        if request.url.path.startswith(API):
            return api_error(401, "unauthorized", "a bearer token is required", "Authorization")
        if (
            request.method == "GET"
            and not wants_json(request)
            and "/events" not in request.url.path
        ):
            target = quote(
                request.url.path + (f"?{request.url.query}" if request.url.query else "")
            )
            return RedirectResponse(f"/login?next={target}", status_code=303)
        return JSONResponse(
            {"error": "a console token is required", "field": "token", "code": "unauthorized"},
            status_code=401,
            headers={"www-authenticate": "Bearer"},
        )


def _hostname(host: str | None) -> str:
    """The name in a Host header, without its port (an IPv6 address without brackets)."""
    if not host:
        return ""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if ":" in host else host


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body the middleware already read, handed to the app once more."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
