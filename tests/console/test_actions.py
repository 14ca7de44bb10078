"""Admitting and deciding through the console: forms and their JSON twins, with the client's
validation, idempotent repeats and conflicts."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from tests.console.helpers import csrf_of, settled_state, submit_until, wait_for_state
from tests.helpers.cli import unknown_side_effect
from threadwarden.client.client import ThreadwardenClient


async def test_console_approve_settles_the_submission_and_a_repeat_changes_nothing(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    asks = await submit_until(client, ids, [{"approval": "refund"}], "suspended")
    token = await csrf_of(http)

    form = await http.post(f"/submissions/{asks.submission_id}/approve", data={"csrf_token": token})
    assert form.status_code == 303 and form.headers["location"] == "/inbox"
    await wait_for_state(client, ids, asks.submission_id, "completed")
    [decision] = [r for r in await client.records(ids) if r["kind"] == "approval-decision"]
    assert decision["body"] == {"approved": True, "operator": "local"}  # who; the record: when

    again = await http.post(
        f"/submissions/{asks.submission_id}/approve",
        params={"format": "json"},
        headers={"x-csrf-token": token},
    )
    assert again.status_code == 200
    assert again.json() | {"operator": "local"} == again.json()
    assert again.json()["changed"] is False and again.json()["outcome"] == "completed"

    conflict = await http.post(
        f"/submissions/{asks.submission_id}/deny",
        params={"format": "json"},
        headers={"x-csrf-token": token},
    )
    assert conflict.status_code == 409 and conflict.json()["code"] == "decision_conflict"
    assert await settled_state(client, ids, asks.submission_id) == "completed"


async def test_console_deny_with_a_reason_fails_the_submission(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    asks = await submit_until(client, ids, [{"approval": "refund"}], "suspended")
    token = await csrf_of(http)
    denied = await http.post(
        f"/submissions/{asks.submission_id}/deny",
        data={"csrf_token": token, "reason": "too much", "next": f"/threads/{ids}"},
    )
    assert denied.status_code == 303 and denied.headers["location"] == f"/threads/{ids}"
    status = await client.thread_status(ids)
    assert status.submissions[0].outcome == "failed"
    assert status.submissions[0].reason == "approval denied: too much"


async def test_console_answer_form_lists_the_question_validates_and_resumes(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    sizes = {"type": "string", "enum": ["S", "M", "L"]}
    asks = await submit_until(
        client, ids, [{"ask": {"question": "size?"}, "schema": sizes}], "suspended"
    )
    inbox = await http.get("/inbox")
    assert "Question: {&#34;question&#34;:&#34;size?&#34;}" in inbox.text
    assert f"/submissions/{asks.submission_id}/answer" in inbox.text
    token = await csrf_of(http)
    url = f"/submissions/{asks.submission_id}/answer"

    no_token = await http.post(url, data={"value": '"L"'})
    assert no_token.status_code == 403
    not_json = await http.post(url, data={"csrf_token": token, "value": "L"})
    assert not_json.status_code == 400 and "value: expected JSON" in not_json.text
    refused = await http.post(
        url, params={"format": "json"}, headers={"x-csrf-token": token}, data={"value": '"XL"'}
    )
    assert refused.status_code == 400
    assert (refused.json()["code"], refused.json()["field"]) == ("invalid_input", "value")

    answered = await http.post(url, data={"csrf_token": token, "value": '"L"'})
    assert answered.status_code == 303 and answered.headers["location"] == "/inbox"
    await wait_for_state(client, ids, asks.submission_id, "completed")
    [answer] = [r for r in await client.records(ids) if r["kind"] == "input-answer"]
    assert answer["body"] == {"value": "L", "operator": "local"}


async def test_console_resolve_decides_an_unknown_side_effect_and_refuses_bad_json(
    pool: asyncpg.Pool[Any], client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    unknown = await unknown_side_effect(pool, ids)
    token = await csrf_of(http)
    inbox = await http.get("/inbox")
    assert f"/submissions/{unknown}/resolve" in inbox.text and "tool charge" in inbox.text

    bad = await http.post(
        f"/submissions/{unknown}/resolve",
        data={"csrf_token": token, "outcome": "ran", "result": "{not json"},
    )
    assert bad.status_code == 400 and "result: expected JSON" in bad.text
    assert await settled_state(client, ids, unknown) == "unknown"

    resolved = await http.post(
        f"/submissions/{unknown}/resolve",
        params={"format": "json"},
        data={"csrf_token": token, "outcome": "fail"},
    )
    assert resolved.status_code == 200 and resolved.json()["outcome"] == "failed"
    assert resolved.json()["changed"] is True
    assert await settled_state(client, ids, unknown) == "failed"


async def test_console_submit_admits_with_the_clients_validation_and_idempotency(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    token = await csrf_of(http, "/")
    fields = {"csrf_token": token, "thread": ids, "agent": "scripted"}
    made = await http.post(
        "/submit",
        data={**fields, "input": '[{"say": "from the console"}]', "idempotency_key": "k1"},
    )
    assert made.status_code == 303 and made.headers["location"] == f"/threads/{ids}"
    [view] = (await client.thread_status(ids)).submissions
    await wait_for_state(client, ids, view.submission_id, "completed")

    repeat = await http.post(
        "/submit",
        params={"format": "json"},
        data={**fields, "input": '[{"say": "from the console"}]', "idempotency_key": "k1"},
    )
    assert repeat.status_code == 200 and repeat.json()["created"] is False
    assert repeat.json()["submission_id"] == view.submission_id
    other = await http.post(
        "/submit",
        params={"format": "json"},
        data={**fields, "input": '[{"say": "else"}]', "idempotency_key": "k1"},
    )
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"

    invalid = await http.post("/submit", data={**fields, "input": '[{"nope": 1}]'})
    assert invalid.status_code == 400
    assert "input[0]: expected one of say" in invalid.text
    assert 'value="scripted"' in invalid.text  # the form keeps what was typed
    not_json = await http.post("/submit", params={"format": "json"}, data={**fields, "input": "["})
    assert not_json.status_code == 400 and not_json.json()["field"] == "input"
    assert len((await client.thread_status(ids)).submissions) == 1
