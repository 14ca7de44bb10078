"""The HTTP API's thread endpoints: submit onto a thread, read its status, follow its records
(and the live text of its steps) as server-sent events."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from threadwarden.client.reads import TURN_SEQUENCE, TURNS_LIMIT, TURNS_PAGE
from threadwarden.client.shapes import thread_json
from threadwarden.console import openapi
from threadwarden.console.api_requests import (
    ApiError,
    handled,
    path_id,
    query_count,
    read_body,
    refusal,
    reply,
)
from threadwarden.console.events import delta_event, event_stream, resume_after, sse_event
from threadwarden.console.security import is_number
from threadwarden.console.web import caller_of, console_of
from threadwarden.errors import InvalidInput
from threadwarden.validation import validate_id

logger = logging.getLogger(__name__)


@handled
async def submit(request: Request) -> Response:
    """``POST /v1/threads/{thread_id}/submissions``: admit one submission."""
    thread_id = path_id(request, "thread_id")
    body = await read_body(request, openapi.SubmitBody)
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
    return reply(
        receipt.model_dump(mode="json"), 201 if receipt.created else 200, {"location": location}
    )


@handled
async def thread(request: Request) -> Response:
    """``GET /v1/threads/{thread_id}``: like ``status --thread --json``."""
    thread_id = path_id(request, "thread_id")
    client = console_of(request).client
    status = await client.thread_status(thread_id)
    return reply(thread_json(status, await client.messages_sent(thread_id)))


@handled
async def turns(request: Request) -> Response:
    """``GET /v1/threads/{thread_id}/turns?limit=N&before=SEQUENCE``: a page of the thread's
    turns, newest first (`ThreadwardenClient.turns`)."""
    thread_id = path_id(request, "thread_id")
    limit = query_count(request, "limit", TURNS_LIMIT)
    page = await console_of(request).client.turns(
        thread_id,
        limit=TURNS_PAGE if limit is None else limit,
        before=query_count(request, "before", TURN_SEQUENCE),
    )
    return reply(page.model_dump(mode="json"))


@handled
async def events(request: Request) -> Response:
    """``GET /v1/threads/{thread_id}/events``: the thread's records as server-sent events."""
    thread_id = path_id(request, "thread_id")
    for name, value in (
        ("after", request.query_params.get("after")),
        ("Last-Event-ID", request.headers.get("last-event-id")),
    ):
        if value is not None and not is_number(value, 18):
            raise ApiError(400, "invalid_input", f"{name}: expected a record sequence", name)
    console = console_of(request)
    if console.feed.full:
        raise ApiError(503, "too_many_streams", "too many event streams open; retry later")
    return event_stream(
        console,
        thread_id,
        resume_after(request),
        record=_record_event,
        delta=delta_event,  # no id: Last-Event-ID is a record's
        refused=_REFUSED,
    )


async def _record_event(record: dict[str, Any]) -> str:
    return sse_event("record", json.dumps(record, default=str), record["sequence"])


_REFUSED = "retry: 5000\n" + sse_event(
    "error", json.dumps({"code": "too_many_streams", "retry_after_s": 5})
)
"""The end of a stream that a burst let past the handler's check (refused at its first read)."""
