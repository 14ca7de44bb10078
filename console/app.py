"""The console's ASGI app: routes, middleware, templates (docs/console.md)."""

from __future__ import annotations

from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.console import actions, events, login, pages
from threadwarden.console.api import create_api
from threadwarden.console.origins import ApiCors, OriginPolicy
from threadwarden.console.queries import ConsoleQueries
from threadwarden.console.security import BodyLimit, Guard, HttpMiddleware
from threadwarden.console.web import STATIC, Authenticate, Console, decision_routes, environment
from threadwarden.reading.shared import LedgerFeed


def create_app(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    settings: Settings,
    *,
    temporal_ui_url: str | None = None,
) -> Starlette:
    """The console and the HTTP API (under ``/v1``) over ``client`` (decisions, status) and
    ``pool`` (its page reads and its one listening connection, `LedgerFeed`).

    ``settings`` gives the tokens, their names, the allowed origins and the body limit;
    ``temporal_ui_url`` (the UI's base URL) makes the host page link its workflow.
    """
    token = settings.console_token.get_secret_value() if settings.console_token else None
    api_token = settings.api_token.get_secret_value() if settings.api_token else None
    guard = Guard(
        token,
        settings.console_token_name,
        api_token=api_token,
        api_token_name=settings.api_token_name,
    )
    api = create_api()
    routes = [
        Route("/", pages.threads),
        Route("/threads/{thread_id}", pages.thread),
        Route("/threads/{thread_id}/events", events.thread_events),
        Route("/inbox", pages.inbox),
        Route("/hosts/{host_id}", pages.host),
        Route("/submit", actions.submit, methods=["POST"]),
        *decision_routes(actions.decide),
        Route("/login", login.form, methods=["GET"]),
        Route("/login", login.sign_in, methods=["POST"]),
        Route("/logout", login.sign_out, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC, follow_symlink=True), name="static"),
        Mount("/v1", app=api),
    ]
    origins = OriginPolicy(tuple(settings.api_allowed_origins))
    cors = [
        Middleware(
            ApiCors,
            policy=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "idempotency-key", "last-event-id"],
            expose_headers=["location"],
            max_age=600,
        )
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            *(cors if origins.allowed else []),
            Middleware(BodyLimit, limit=settings.console_max_body_bytes),
            Middleware(Headers),
            Middleware(Authenticate, guard=guard, origins=origins),
        ],
    )
    app.state.console = api.state.console = Console(
        client=client,
        queries=ConsoleQueries(pool),
        pool=pool,
        settings=settings,
        guard=guard,
        temporal_ui_url=temporal_ui_url.rstrip("/") if temporal_ui_url else None,
        feed=LedgerFeed(pool),
    )
    app.state.templates = environment()
    return app


class Headers(HttpMiddleware):
    """ASGI middleware: no framing, no sniffing, scripts only from the console itself."""

    POLICY = (
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        b" frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    )

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (b"content-security-policy", self.POLICY),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)
