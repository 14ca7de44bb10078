"""The HTTP API for applications, under ``/v1`` (docs/api.md): submit, read, decide and follow
threads over JSON.

Every handler goes through `ThreadwardenClient`, with its validation; every refusal is
``{"error": {"code", "message", "field"?}}`` with 400, 401, 403, 404, 409, 413 or 415, and is
made before anything is written. Bodies are JSON objects only (``application/json``), checked
against the request models of `threadwarden.console.openapi`, which also describes every
endpoint. Who may do what is `Authenticate`'s (`threadwarden.console.web`): each decision
records the caller's token name as its operator; resolving needs the console token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from threadwarden.client.shapes import thread_json
from threadwarden.console import openapi
from threadwarden.console.events import KEEPALIVE_S, SSE_HEADERS, resume_after, sse_event
from threadwarden.console.feed import StreamsFull
from threadwarden.console.security import BodyTooLarge, is_number
from threadwarden.console.web import Console, api_error, caller_of, console_of, error_status
from threadwarden.errors import (
    DecisionConflict,
    HostMismatch,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    NotWaiting,
    PoolExhausted,
    ThreadBusy,
    ThreadwardenError,
)
from threadwarden.ledger.deltas import Delta
from threadwarden.validation import MAX_JSON_DEPTH, check_json_tree, validate_id
from threadwarden.views import OperatorResult, SubmissionDetail

logger = logging.getLogger(__name__)

JSON = "application/json"
Body = TypeVar("Body", bound=BaseModel)
MAX_WAIT_S = 300.0
"""The longest ``GET /v1/submissions/{id}/result?wait=`` waits."""


class ApiError(Exception):
    """A refusal of the API, answered as its error document."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field

    def response(self) -> Response:
        return api_error(self.status, self.code, str(self), self.field)


FIELD_OF: dict[type[ThreadwardenError], str] = {
    ThreadBusy: "thread_id",
    IdempotencyConflict: "Idempotency-Key",
    HostMismatch: "host",
}
"""The field a conflict is about (an `InvalidInput` names its own)."""


def refusal(error: ThreadwardenError) -> ApiError:
    """A threadwarden error as the API's: its status, stable code and field."""
    field = getattr(error, "field", None) or FIELD_OF.get(type(error))
    if isinstance(error, InvalidInput):
        return ApiError(400, "invalid_input", str(error), field)
    if isinstance(error, NotFound):  # "thread: no thread 'x'": the path's thread_id
        subject = str(error).partition(":")[0]
        return ApiError(404, "not_found", str(error), f"{subject}_id" if subject else None)
    if isinstance(error, DecisionConflict):
        return ApiError(409, "decision_conflict", str(error), "submission_id")
    if isinstance(error, NotWaiting):
        return ApiError(409, "not_waiting", str(error), "submission_id")
    if isinstance(error, PoolExhausted):  # overload: the caller retries later
        return ApiError(503, "unavailable", str(error))
    return ApiError(409, error_status(error)[1], str(error), field)


def _answer(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(json.loads(json.dumps(value, default=str)), status, headers=headers)


async def _body(request: Request, model: type[Body]) -> Body:
    """The request's JSON object body as ``model``, or an `ApiError` naming what is wrong."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != JSON:
        raise ApiError(415, "unsupported_media_type", f"expected {JSON}", "Content-Type")
    try:
        raw = await request.body()
    except BodyTooLarge as error:  # a chunked body past the limit (`BodyLimit`)
        limit = console_of(request).settings.console_max_body_bytes
        message = f"request body larger than {limit} bytes"
        raise ApiError(413, "too_large", message, "body") from error
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ApiError(400, "invalid_input", "body: expected UTF-8 JSON", "body") from error
    except RecursionError as error:
        raise ApiError(400, "invalid_input", "body: nested too deeply", "body") from error
    except ValueError as error:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise ApiError(
            400, "invalid_input", f"body: expected JSON ({error})"[:200], "body"
        ) from error
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_input", "body: expected a JSON object", "body")
    try:
        check_json_tree("body", value, max_depth=MAX_JSON_DEPTH + 1)
        return model.model_validate(value)
    except InvalidInput as error:
        raise refusal(error) from error
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(400, "invalid_input", f"{field}: {first['msg']}", field) from error


def _path_id(request: Request, name: str, field: str) -> str:
    try:
        return validate_id(field, request.path_params[name])
    except InvalidInput as error:
        raise refusal(error) from error


def _handled(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with its refusals answered as the API's errors."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as error:
            return error.response()
        except ThreadwardenError as error:
            return refusal(error).response()

    handle.__name__ = handler.__name__
    handle.__doc__ = handler.__doc__
    return handle


@_handled
async def submit(request: Request) -> Response:
    """``POST /v1/threads/{thread_id}/submissions``: admit one submission."""
    thread_id = _path_id(request, "thread_id", "thread_id")
    body = await _body(request, openapi.SubmitBody)
    key = request.headers.get("idempotency-key")
    if key is not None:
        try:
            validate_id("Idempotency-Key", key)
        except InvalidInput as error:
            raise refusal(error) from error
    receipt = await console_of(request).client.submit(
        thread_id,
        agent_id=body.agent,
        input=body.input,
        idempotency_key=key,
        host_id=body.host,
        agent_digest=body.agent_digest,
        if_busy=body.if_busy,
    )
    logger.info(
        "api: submit %s on thread %s by %s%s",
        receipt.submission_id,
        receipt.thread_id,
        caller_of(request).name,
        "" if receipt.created else " (repeated)",
    )
    location = f"/v1/submissions/{receipt.submission_id}"
    return _answer(
        receipt.model_dump(mode="json"), 201 if receipt.created else 200, {"location": location}
    )


@_handled
async def submission(request: Request) -> Response:
    """``GET /v1/submissions/{submission_id}``."""
    submission_id = _path_id(request, "submission_id", "submission_id")
    detail = await console_of(request).client.submission(submission_id)
    return _answer(detail.model_dump(mode="json"))


@_handled
async def result(request: Request) -> Response:
    """``GET /v1/submissions/{submission_id}/result?wait=S``: 200 once settled, 202 when the
    wait ended first (the same document: its state says where it is)."""
    submission_id = _path_id(request, "submission_id", "submission_id")
    wait_s = _wait(request.query_params.get("wait", "0"))
    console = console_of(request)
    detail = await console.client.submission(submission_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    if detail.outcome is None and wait_s > 0:
        detail = await _wait_settled(console, detail.thread_id, submission_id, deadline)
    return _answer(detail.model_dump(mode="json"), 202 if detail.outcome is None else 200)


async def _wait_settled(
    console: Console, thread_id: str, submission_id: str, deadline: float
) -> SubmissionDetail:
    loop = asyncio.get_running_loop()
    with console.feed.subscribe(thread_id) as hint:  # before the read: nothing slips between
        detail = await console.client.submission(submission_id)
        while detail.outcome is None and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hint.wait(), min(left, console.feed.recheck_s))
            hint.clear()  # before the read: a record committed during it wakes the next wait
            detail = await console.client.submission(submission_id)
    return detail


def _wait(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_S:  # also NaN
        message = f"wait: expected seconds from 0 to {MAX_WAIT_S:g}, got {text[:40]!r}"
        raise ApiError(400, "invalid_input", message, "wait")
    return seconds


@_handled
async def thread(request: Request) -> Response:
    """``GET /v1/threads/{thread_id}``: like ``status --thread --json``."""
    thread_id = _path_id(request, "thread_id", "thread_id")
    client = console_of(request).client
    status = await client.thread_status(thread_id)
    return _answer(thread_json(status, await client.messages_sent(thread_id)))


@_handled
async def inbox(request: Request) -> Response:
    """``GET /v1/inbox?limit=N``: what waits for a person, oldest first."""
    text = request.query_params.get("limit", "100")
    if not is_number(text, 6):
        raise ApiError(
            400, "invalid_input", f"limit: expected 1 to 1000, got {text[:40]!r}", "limit"
        )
    page = await console_of(request).client.inbox(limit=int(text))
    return _answer(page.model_dump(mode="json"))


@_handled
async def approve(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/approve`` ``{}``."""
    await _body(request, openapi.ApproveBody)
    return await _decided(request, lambda client, sid, who: client.approve(sid, operator=who))


@_handled
async def deny(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/deny`` ``{"reason"?}``."""
    body = await _body(request, openapi.DenyBody)
    return await _decided(
        request, lambda client, sid, who: client.deny(sid, body.reason, operator=who)
    )


@_handled
async def answer(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/answer`` ``{"value"}``."""
    body = await _body(request, openapi.AnswerBody)
    return await _decided(
        request, lambda client, sid, who: client.answer(sid, body.value, operator=who)
    )


@_handled
async def resolve(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/resolve`` ``{"outcome", "result"?}``: the
    console token only."""
    if caller_of(request).role != "console":
        message = "resolving an unknown side effect needs the console token"
        raise ApiError(403, "forbidden", message, "Authorization")
    body = await _body(request, openapi.ResolveBody)
    return await _decided(
        request,
        lambda client, sid, who: client.resolve(sid, body.outcome, body.result, operator=who),
    )


@_handled
async def abort(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/abort`` ``{}``."""
    await _body(request, openapi.AbortBody)
    return await _decided(request, lambda client, sid, who: client.abort(sid, operator=who))


async def _decided(request: Request, decide: Callable[..., Awaitable[OperatorResult]]) -> Response:
    submission_id = _path_id(request, "submission_id", "submission_id")
    who = caller_of(request).name
    result: OperatorResult = await decide(console_of(request).client, submission_id, who)
    action = request.url.path.rpartition("/")[2]
    logger.info(
        "api: %s %s by %s (%s)", action, submission_id, who, "changed" if result.changed else "same"
    )
    return _answer({**result.model_dump(mode="json"), "operator": who})


@_handled
async def events(request: Request) -> Response:
    """``GET /v1/threads/{thread_id}/events``: the thread's records as server-sent events."""
    thread_id = _path_id(request, "thread_id", "thread_id")
    for name, value in (
        ("after", request.query_params.get("after")),
        ("Last-Event-ID", request.headers.get("last-event-id")),
    ):
        if value is not None and not is_number(value, 18):
            raise ApiError(400, "invalid_input", f"{name}: expected a record sequence", name)
    console = console_of(request)
    if console.feed.full:
        raise ApiError(503, "too_many_streams", "too many event streams open; retry later")
    return StreamingResponse(
        _records(request, thread_id, resume_after(request)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _records(request: Request, thread_id: str, after: int) -> AsyncIterator[str]:
    yield ": live\n\n"
    feed = console_of(request).feed.follow(thread_id, after, idle_s=KEEPALIVE_S, live=True)
    try:
        async with contextlib.aclosing(feed):
            async for item in feed:
                if item is None:
                    yield ": keepalive\n\n"
                elif isinstance(item, Delta):  # live text: no id (Last-Event-ID is a record's)
                    yield sse_event("delta", json.dumps(delta_json(item)))
                else:
                    yield sse_event("record", json.dumps(item, default=str), item["sequence"])
    except StreamsFull:  # a burst passed the handler's check: refused at its first read
        yield "retry: 5000\n"
        yield sse_event("error", json.dumps({"code": "too_many_streams", "retry_after_s": 5}))


def delta_json(delta: Delta) -> dict[str, Any]:
    """A live-text event's data: the new fragment of a step's text; ``restart``: the step
    started over (a re-run after a cut-off attempt), drop what was shown of it."""
    return {
        "submission_id": delta.submission_id,
        "step": delta.step,
        "text": delta.text,
        "restart": delta.restart,
    }


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
        Route("/threads/{thread_id}/submissions", submit, methods=["POST"]),
        Route("/threads/{thread_id}", thread),
        Route("/threads/{thread_id}/events", events),
        Route("/inbox", inbox),
        Route("/submissions/{submission_id}", submission),
        Route("/submissions/{submission_id}/result", result),
        Route("/submissions/{submission_id}/approve", approve, methods=["POST"]),
        Route("/submissions/{submission_id}/deny", deny, methods=["POST"]),
        Route("/submissions/{submission_id}/answer", answer, methods=["POST"]),
        Route("/submissions/{submission_id}/resolve", resolve, methods=["POST"]),
        Route("/submissions/{submission_id}/abort", abort, methods=["POST"]),
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
