"""The HTTP API's submission endpoints: read one, wait for its result, decide its waits
(approve, deny, answer, resolve, abort), and the inbox of those waiting for a person."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from threadwarden.console import openapi
from threadwarden.console.api_requests import ApiError, handled, path_id, read_body, reply
from threadwarden.console.security import is_number
from threadwarden.console.web import Console, caller_of, console_of
from threadwarden.ledger.models import SubmissionDetail
from threadwarden.ledger.operator import OperatorResult

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
    text = request.query_params.get("limit", "100")
    if not is_number(text, 6):
        raise ApiError(
            400, "invalid_input", f"limit: expected 1 to 1000, got {text[:40]!r}", "limit"
        )
    page = await console_of(request).client.inbox(limit=int(text))
    return reply(page.model_dump(mode="json"))


@handled
async def approve(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/approve`` ``{}``."""
    await read_body(request, openapi.ApproveBody)
    return await _decided(request, lambda client, sid, who: client.approve(sid, operator=who))


@handled
async def deny(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/deny`` ``{"reason"?}``."""
    body = await read_body(request, openapi.DenyBody)
    return await _decided(
        request, lambda client, sid, who: client.deny(sid, body.reason, operator=who)
    )


@handled
async def answer(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/answer`` ``{"value"}``."""
    body = await read_body(request, openapi.AnswerBody)
    return await _decided(
        request, lambda client, sid, who: client.answer(sid, body.value, operator=who)
    )


@handled
async def resolve(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/resolve`` ``{"outcome", "result"?}``: the
    console token only."""
    if caller_of(request).role != "console":
        message = "resolving an unknown side effect needs the console token"
        raise ApiError(403, "forbidden", message, "Authorization")
    body = await read_body(request, openapi.ResolveBody)
    return await _decided(
        request,
        lambda client, sid, who: client.resolve(sid, body.outcome, body.result, operator=who),
    )


@handled
async def abort(request: Request) -> Response:
    """``POST /v1/submissions/{submission_id}/abort`` ``{}``."""
    await read_body(request, openapi.AbortBody)
    return await _decided(request, lambda client, sid, who: client.abort(sid, operator=who))


async def _decided(request: Request, decide: Callable[..., Awaitable[OperatorResult]]) -> Response:
    submission_id = path_id(request, "submission_id")
    who = caller_of(request).name
    result: OperatorResult = await decide(console_of(request).client, submission_id, who)
    action = request.url.path.rpartition("/")[2]
    logger.info(
        "api: %s %s by %s (%s)", action, submission_id, who, "changed" if result.changed else "same"
    )
    return reply({**result.model_dump(mode="json"), "operator": who})
