"""What each surface says of a refusal comes from one place (`field_of`, `error_code` in
`threadwarden.errors`): the CLI's ``--json`` error, the API's error document and a console
form's JSON name the same field, each in its own spelling, with the same stable code."""

from __future__ import annotations

import json

import pytest

from threadwarden.console.api_requests import refusal
from threadwarden.console.web import Forbidden, error_json
from threadwarden.errors import (
    ChildConflict,
    DecisionConflict,
    HostMismatch,
    IdempotencyConflict,
    InvalidInput,
    NotWaiting,
    ThreadBusy,
    ThreadwardenError,
    field_of,
)

REFUSALS = [
    (ThreadBusy("thread: t has a submission"), "thread", "thread_id", "thread_busy", 409),
    (IdempotencyConflict("k"), "idempotency_key", "Idempotency-Key", "idempotency_conflict", 409),
    (ChildConflict("c"), "idempotency_key", "Idempotency-Key", "child_conflict", 409),
    (HostMismatch("h"), "host", "host", "host_mismatch", 409),
    (NotWaiting("n"), "submission", "submission_id", "not_waiting", 409),
    (DecisionConflict("d"), "submission", "submission_id", "decision_conflict", 409),
    (InvalidInput("limit", "an integer"), "limit", "limit", "invalid_input", 400),
    (Forbidden("no"), "token", "token", "forbidden", 403),
]


@pytest.mark.parametrize(("error", "cli", "api", "code", "status"), REFUSALS)
def test_each_surface_names_the_field_a_refusal_is_about(
    error: ThreadwardenError, cli: str, api: str, code: str, status: int
) -> None:
    assert field_of(error) == cli  # the CLI's field (and its exit code 2)
    refused = refusal(error)
    assert (refused.field, refused.code, refused.status) == (api, code, status)
    form = json.loads(bytes(error_json(error).body))
    assert (form["field"], form["code"]) == (cli, code)
