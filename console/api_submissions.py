"""The HTTP API's submission endpoints: read one, wait for its result, decide its waits
(approve, deny, answer, resolve, abort), and the inbox of those waiting for a person."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from threadwarden.client.reads import INBOX_LIMIT
from threadwarden.console import openapi
from threadwarden.console.api_requests import (
    ApiError,
    handled,
    path_id,
    query_count,
    read_body,
    reply,
)
from threadwarden.console.web import Console, Decision, caller_of, console_of, decision_of
from threadwarden.views import SubmissionDetail

logger = logging.getLogger(__name__)

MAX_WAIT_S = 300.0
"""The longest ``GET /v1/submissions/{id}/result?wait=`` waits."""


@handled
async def submission(request: Request) -> Response:
    """``GET /v1/submissions/{submission_id}``."""
    submission_id = path_id(request, "submission_id")
    detail = await console_of(request).client.submission(submission_id)
    return reply(detail.model_dump(mode="json"))


@handled
async def result(request: Request) -> Response:
    """``GET /v1/submissions/{submission_id}/result?wait=S``: 200 once settled, 202 when the
    wait ended first (the same document: its state says where it is)."""
    submission_id = path_id(request, "submission_id")
    wait_s = _wait(request.query_params.get("wait", "0"))
    console = console_of(request)
    detail = await console.client.submission(submission_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    if detail.outcome is None and wait_s > 0:
        detail = await _wait_settled(console, detail.thread_id, submission_id, deadline)
    return reply(detail.model_dump(mode="json"), 202 if detail.outcome is None else 200)


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


@handled
async def inbox(request: Request) -> Response:
    """``GET /v1/inbox?limit=N``: what waits for a person, oldest first."""
    limit = query_count(request, "limit", INBOX_LIMIT)
    page = await console_of(request).client.inbox(limit=100 if limit is None else limit)
    return reply(page.model_dump(mode="json"))


DECISION_BODIES: dict[Decision, type[BaseModel]] = {
    "approve": openapi.ApproveBody,
    "deny": openapi.DenyBody,
    "answer": openapi.AnswerBody,
    "resolve": openapi.ResolveBody,
    "abort": openapi.AbortBody,
}
"""The body each decision takes."""


@handled
async def decide(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/DECISION``: ``approve`` ``{}``, ``deny``
    ``{"reason"?}``, ``answer`` ``{"value"}``, ``resolve`` ``{"outcome", "result"?}`` (the
    console token only) or ``abort`` ``{}``."""
    decision = decision_of(request)
    caller = caller_of(request)
    refused = caller.refusal(decision)
    if refused is not None:
        raise ApiError(403, "forbidden", refused, "Authorization")
    body = await read_body(request, DECISION_BODIES[decision])
    submission_id = path_id(request, "submission_id")
    client = console_of(request).client
    match body:
        case openapi.DenyBody(reason=reason):
            result = await client.deny(submission_id, reason, operator=caller.name)
        case openapi.AnswerBody(value=value):
            result = await client.answer(submission_id, value, operator=caller.name)
        case openapi.ResolveBody(outcome=outcome, result=value):
            result = await client.resolve(submission_id, outcome, value, operator=caller.name)
        case openapi.AbortBody():
            result = await client.abort(submission_id, operator=caller.name)
        case _:  # openapi.ApproveBody
            result = await client.approve(submission_id, operator=caller.name)
    logger.info(
        "api: %s %s by %s (%s)",
        decision,
        submission_id,
        caller.name,
        "changed" if result.changed else "same",
    )
    return reply({**result.model_dump(mode="json"), "operator": caller.name})
