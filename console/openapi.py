"""The HTTP API's request bodies and its OpenAPI 3.1 document (``GET /v1/openapi.json``).

The bodies are the models `threadwarden.console.api` validates requests with, and every
schema in the document is generated from the models the API answers with, so the document
cannot drift from the code.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from threadwarden.client.reads import TURNS_MAX_LIMIT, TURNS_PAGE
from threadwarden.ledger.inbox import InboxPage
from threadwarden.validation import IfBusy
from threadwarden.views import OperatorResult, Receipt, SubmissionDetail, SubmissionView, TurnPage


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SubmitBody(_Body):
    """``POST /v1/threads/{thread_id}/submissions``."""

    agent: str = Field(description="The agent id of the binding to run.")
    input: Any = Field(description="The submission's input: any JSON value (at most 64 KiB).")
    host: str | None = Field(default=None, description="The host to group a new thread under.")
    agent_digest: str | None = Field(default=None, description="Pin to this binding digest.")
    if_busy: IfBusy = Field(
        default="enqueue",
        description="When the thread has a submission that has not settled: queue behind it"
        " (enqueue), admit nothing and answer 409 thread_busy (reject), or ask each earlier"
        " one to abort in the same transaction and run next (interrupt).",
    )


class ApproveBody(_Body):
    """``POST /v1/submissions/{id}/approve``: ``{}``."""


class AbortBody(_Body):
    """``POST /v1/submissions/{id}/abort``: ``{}``."""


class DenyBody(_Body):
    """``POST /v1/submissions/{id}/deny``."""

    reason: str | None = Field(default=None, description="Why (one line, recorded).")


class AnswerBody(_Body):
    """``POST /v1/submissions/{id}/answer``."""

    value: Any = Field(description="The answer, valid under the question's schema if it has one.")


class ResolveBody(_Body):
    """``POST /v1/submissions/{id}/resolve`` (the console token only)."""

    outcome: Literal["ran", "not-run", "fail"]
    result: Any = Field(default=None, description="What the side effect returned (ran only).")


class Decision(OperatorResult):
    """What a decision did; ``changed`` false when it repeated one already taken."""

    operator: str = Field(description="Who decided: the caller's token name (or local).")


class ThreadDocument(BaseModel):
    """A thread's submissions in queue order and the messages it sent (``status --thread``)."""

    thread_id: str
    host_id: str
    submissions: list[SubmissionView]
    messages_sent: list[dict[str, Any]]


class ErrorDetail(BaseModel):
    code: str = Field(
        description="Stable: invalid_input, unauthorized, forbidden, not_found,"
        " thread_busy, idempotency_conflict, decision_conflict, not_waiting, …"
    )
    message: str
    field: str | None = Field(default=None, description="The field, header or parameter.")


class Error(BaseModel):
    """Every refusal; nothing was written."""

    error: ErrorDetail


_MODELS: list[type[BaseModel]] = [
    SubmitBody,
    ApproveBody,
    AbortBody,
    DenyBody,
    AnswerBody,
    ResolveBody,
    Receipt,
    SubmissionDetail,
    ThreadDocument,
    TurnPage,
    InboxPage,
    Decision,
    Error,
]

_ERRORS = {
    "400": "Bad input (the error names the field)",
    "401": "No valid bearer token",
    "403": "Not allowed (token, Origin or Host)",
    "404": "No such thread or submission",
    "409": "Conflicts with the ledger's state",
    "413": "Body larger than console_max_body_bytes",
    "415": "Body not application/json",
    "503": "Too many event streams open, or the ledger unavailable: retry later",
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _operation(
    summary: str,
    ok: dict[str, dict[str, Any]],
    *,
    body: type[BaseModel] | None = None,
    errors: tuple[str, ...] = ("400", "401", "403", "404"),
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": dict(ok)}
    for status in errors:
        operation["responses"][status] = _json(Error, _ERRORS[status])
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    if parameters:
        operation["parameters"] = parameters
    return operation


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _on(name: str, method: str, operation: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    """A path with the path parameter ``name`` (and the parameters ``more``): its operation."""
    return {"parameters": [_path(name), *more], method: operation}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema, "description": description}


_POST_ERRORS = ("400", "401", "403", "404", "409", "413", "415")


def _decision(summary: str, body: type[BaseModel]) -> dict[str, Any]:
    ok = {"200": _json(Decision, "Taken, or repeated (changed false)")}
    return _on("submission_id", "post", _operation(summary, ok, body=body, errors=_POST_ERRORS))


@functools.cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every endpoint under ``/v1``."""
    _, schemas = models_json_schema(
        [(model, "serialization") for model in _MODELS],
        ref_template="#/components/schemas/{model}",
    )
    events = {
        "description": "Server-sent events: each record as `event: record`, `id:` its"
        " sequence, `data:` the record as `watch --json` prints it; live text as `event: delta`"
        " (no id) with data {submission_id, step, text, restart}; comments keep it alive",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    idempotency = {
        "name": "Idempotency-Key",
        "in": "header",
        "schema": {"type": "string"},
        "description": "Admit at most once per key on this thread.",
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "threadwarden API",
            "version": "1",
            "description": "Submit, read, decide and follow threads (docs/api.md).",
        },
        "components": {
            "schemas": schemas["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
        "paths": {
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {
                        "200": {
                            "description": "The OpenAPI 3.1 document of every endpoint",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": _json(Error, _ERRORS["401"]),
                        "403": _json(Error, _ERRORS["403"]),
                    },
                }
            },
            "/v1/threads/{thread_id}/submissions": _on(
                "thread_id",
                "post",
                _operation(
                    "Admit a submission",
                    {
                        "201": _json(Receipt, "Admitted"),
                        "200": _json(Receipt, "Already admitted with this Idempotency-Key"),
                    },
                    body=SubmitBody,
                    errors=("400", "401", "403", "409", "413", "415"),
                ),
                idempotency,
            ),
            "/v1/threads/{thread_id}": _on(
                "thread_id",
                "get",
                _operation("A thread's status", {"200": _json(ThreadDocument, "Its status")}),
            ),
            "/v1/threads/{thread_id}/turns": _on(
                "thread_id",
                "get",
                _operation(
                    "A page of a thread's turns, newest first",
                    {"200": _json(TurnPage, "The turns; next_before pages back")},
                ),
                _query(
                    "limit",
                    {"type": "integer", "minimum": 1, "maximum": TURNS_MAX_LIMIT},
                    f"The most turns (default {TURNS_PAGE}).",
                ),
                _query(
                    "before",
                    {"type": "integer", "minimum": 1},
                    "Only turns with a lower sequence (a page's next_before).",
                ),
            ),
            "/v1/threads/{thread_id}/events": _on(
                "thread_id",
                "get",
                _operation(
                    "Follow a thread's records",
                    {"200": events},
                    errors=("400", "401", "403", "503"),
                ),
                _query("after", {"type": "integer", "minimum": 0}, "Resume after it."),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "schema": {"type": "string"},
                    "description": "Resume after it (the larger of it and after counts).",
                },
            ),
            "/v1/submissions/{submission_id}": _on(
                "submission_id",
                "get",
                _operation("A submission now", {"200": _json(SubmissionDetail, "Its state")}),
            ),
            "/v1/submissions/{submission_id}/result": _on(
                "submission_id",
                "get",
                _operation(
                    "Wait for a submission's settlement",
                    {
                        "200": _json(SubmissionDetail, "Settled"),
                        "202": _json(SubmissionDetail, "Not settled when the wait ended"),
                    },
                ),
                _query(
                    "wait",
                    {"type": "number", "minimum": 0, "maximum": 300},
                    "Seconds to wait for the settlement (default 0).",
                ),
            ),
            "/v1/inbox": {
                "get": _operation(
                    "What waits for a person",
                    {"200": _json(InboxPage, "Oldest first")},
                    errors=("400", "401", "403"),
                    parameters=[
                        _query(
                            "limit",
                            {"type": "integer", "minimum": 1, "maximum": 1000},
                            "The most entries (default 100).",
                        )
                    ],
                ),
            },
            "/v1/submissions/{submission_id}/approve": _decision("Approve", ApproveBody),
            "/v1/submissions/{submission_id}/deny": _decision("Deny", DenyBody),
            "/v1/submissions/{submission_id}/answer": _decision("Answer a question", AnswerBody),
            "/v1/submissions/{submission_id}/resolve": _decision(
                "Resolve an unknown side effect (console token)", ResolveBody
            ),
            "/v1/submissions/{submission_id}/abort": _decision("Abort", AbortBody),
        },
    }
