"""The console's state-changing requests: admit, approve, deny, answer, resolve, stop (abort).

Each goes through `ThreadwardenClient`, with the CLI's validation and errors, and is logged with
who and when. A form gets 303 to the page that shows the change (htmx follows it and swaps the
page in place); ``?format=json`` gets the client's result, or the CLI's error object.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, assert_never, cast
from urllib.parse import parse_qs, quote

from starlette.requests import Request
from starlette.responses import Response

from threadwarden.console.pages import inbox_view, thread_view
from threadwarden.console.web import (
    FORM,
    Decision,
    Forbidden,
    as_json,
    caller_of,
    console_of,
    decision_of,
    error_json,
    error_status,
    operator_of,
    safe_next,
    see_other,
    wants_json,
)
from threadwarden.errors import InvalidInput, ThreadwardenError
from threadwarden.ledger.operator import Resolution
from threadwarden.validation import validate_id
from threadwarden.views import OperatorResult

logger = logging.getLogger(__name__)


async def _fields(request: Request) -> dict[str, str]:
    if not request.headers.get("content-type", "").startswith(FORM):
        body = await request.body()
        if not body:
            return {}
        raise InvalidInput("body", f"a form ({FORM})", request.headers.get("content-type"))
    parsed = parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in parsed.items()}


def _json_field(fields: dict[str, str], name: str) -> Any:
    text = fields.get(name, "")
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidInput(name, f"JSON ({error})", text[:80]) from error


def _optional(fields: dict[str, str], name: str) -> str | None:
    value = fields.get(name, "").strip()
    return value or None


async def submit(request: Request) -> Response:
    """``POST /submit``: admit a submission (thread, agent, input JSON, idempotency key)."""
    console = console_of(request)
    fields: dict[str, str] = {}
    try:
        fields = await _fields(request)
        thread_id = fields.get("thread", "").strip()
        validate_id("thread", thread_id)
        receipt = await console.client.submit(
            thread_id,
            agent_id=fields.get("agent", "").strip(),
            input=_json_field(fields, "input"),
            idempotency_key=_optional(fields, "idempotency_key"),
            host_id=_optional(fields, "host"),
        )
    except ThreadwardenError as error:
        if wants_json(request):
            return error_json(error)
        thread_id = fields.get("thread", "")
        status = 400 if isinstance(error, InvalidInput) else 409
        try:
            validate_id("thread", thread_id)
        except InvalidInput:
            return Response(f"{error}\n", status, media_type="text/plain")
        return await thread_view(
            request, thread_id, status_code=status, error=str(error), form=fields
        )
    _log(request, "submit", receipt.submission_id, f"on thread {receipt.thread_id}")
    if wants_json(request):
        return as_json(receipt.model_dump(mode="json"))
    return see_other(f"/threads/{quote(receipt.thread_id, safe='')}")


async def decide(request: Request) -> Response:
    """``POST /submissions/{id}/DECISION``: ``approve`` a pending approval, ``deny`` it (with
    an optional ``reason``), ``answer`` a pending question (``value``, JSON), ``resolve`` an
    unknown side effect (``outcome`` ran, with ``result`` JSON, not-run or fail; the console
    token only) or ``abort`` (the thread page's Stop button)."""
    decision = decision_of(request)
    submission_id = request.path_params["submission_id"]
    fields: dict[str, str] = {}
    try:
        validate_id("submission", submission_id)
        refused = caller_of(request).refusal(decision)
        if refused is not None:
            raise Forbidden(refused)
        fields = await _fields(request)
        result = await _take(request, decision, submission_id, fields)
    except ThreadwardenError as error:
        if wants_json(request):
            return error_json(error)
        status, _ = error_status(error)
        return await inbox_view(request, status_code=status, error=str(error))
    detail = f"now {result.state}{f' ({result.outcome})' if result.outcome else ''}"
    if not result.changed:
        detail = f"nothing changed, already {result.state}"
    _log(request, decision, submission_id, detail)
    if wants_json(request):
        return as_json({**result.model_dump(mode="json"), "operator": operator_of(request)})
    return see_other(safe_next(fields.get("next"), "/inbox"))


async def _take(
    request: Request, decision: Decision, submission_id: str, fields: dict[str, str]
) -> OperatorResult:
    client = console_of(request).client
    who = operator_of(request)
    match decision:
        case "approve":
            return await client.approve(submission_id, operator=who)
        case "deny":
            return await client.deny(submission_id, _optional(fields, "reason"), operator=who)
        case "answer":
            return await client.answer(submission_id, _json_field(fields, "value"), operator=who)
        case "resolve":
            outcome = cast(Resolution, fields.get("outcome", ""))  # the client checks it
            result = _json_field(fields, "result") if outcome == "ran" else None
            return await client.resolve(submission_id, outcome, result, operator=who)
        case "abort":
            return await client.abort(submission_id, operator=who)
    assert_never(decision)


def _log(request: Request, action: str, submission_id: str, detail: str) -> None:
    logger.info(
        "console: %s %s %s by %s at %s",
        action,
        submission_id,
        detail,
        operator_of(request),
        datetime.now(UTC).isoformat(),
    )
