"""The HTTP API for applications, under ``/v1`` (docs/api.md): submit, read, decide and follow
threads over JSON.

Every handler goes through `ThreadwardenClient`, with its validation; every refusal is
``{"error": {"code", "message", "field"?}}`` with 400, 401, 403, 404, 409, 413 or 415, and is
made before anything is written (`threadwarden.console.api_requests`). Bodies are JSON objects
only (``application/json``), checked against the request models of
`threadwarden.console.openapi`, which also describes every endpoint. Who may do what is
`Authenticate`'s (`threadwarden.console.web`): each decision records the caller's token name as
its operator; resolving needs the console token. The endpoints are those of threads
(`threadwarden.console.api_threads`) and of submissions (`threadwarden.console.api_submissions`);
this module routes them.
"""

from __future__ import annotations

import logging

import asyncpg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from threadwarden.console import api_submissions as submissions
from threadwarden.console import api_threads as threads
from threadwarden.console import openapi
from threadwarden.console.web import api_error, decision_routes

logger = logging.getLogger(__name__)


async def document(request: Request) -> Response:
    """``GET /v1/openapi.json``."""
    return JSONResponse(openapi.document())


async def _not_found(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if error.status_code == 405:
        return api_error(405, "method_not_allowed", f"{request.method} is not allowed here")
    return api_error(error.status_code, "not_found", f"no endpoint {request.url.path[:200]}")


async def _unavailable(request: Request, error: Exception) -> Response:
    logger.warning("api: %s %s failed: %r", request.method, request.url.path, error)
    return api_error(503, "unavailable", "the ledger is unavailable; retry later")


async def _internal(request: Request, error: Exception) -> Response:
    logger.exception("api: %s %s failed", request.method, request.url.path, exc_info=error)
    return api_error(500, "internal", "internal error")


def create_api() -> Starlette:
    """The API's app, mounted at ``/v1`` by `threadwarden.console.app.create_app` (which
    gives it the console's state)."""
    routes = [
        Route("/openapi.json", document),
        Route("/threads/{thread_id}/submissions", threads.submit, methods=["POST"]),
        Route("/threads/{thread_id}", threads.thread),
        Route("/threads/{thread_id}/events", threads.events),
        Route("/threads/{thread_id}/turns", threads.turns),
        Route("/inbox", submissions.inbox),
        Route("/submissions/{submission_id}", submissions.submission),
        Route("/submissions/{submission_id}/result", submissions.result),
        *decision_routes(submissions.decide),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: _not_found,
            asyncpg.PostgresError: _unavailable,
            asyncpg.InterfaceError: _unavailable,
            OSError: _unavailable,
            Exception: _internal,
        },
    )
