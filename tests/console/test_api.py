"""The HTTP API under /v1, driven with httpx against the real stack: admit, read, wait, decide,
and what a second message does mid-turn (``if_busy``)."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from tests.console.api import error_of, ledger_snapshot, post, settled, state_of
from tests.helpers.cli import unknown_side_effect
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient

SLOW = [{"say": f"part {n}"} if n % 2 == 0 else {"sleep_ms": 300} for n in range(40)]
"""A scripted turn that runs for about 6 s, committing a step every 300 ms."""


async def test_api_submit_answers_201_then_the_same_receipt_and_409_for_another_body(
    worker: None, http: httpx.AsyncClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    body = {"agent": "scripted", "input": [{"say": "hello"}]}
    first = await post(http, f"/v1/threads/{ids}/submissions", body, idempotency_key="k1")
    assert first.status_code == 201, first.text
    receipt = first.json()
    assert receipt["thread_id"] == ids and receipt["created"] is True
    assert receipt["interrupted"] == []
    assert first.headers["location"] == f"/v1/submissions/{receipt['submission_id']}"

    again = await post(http, f"/v1/threads/{ids}/submissions", body, idempotency_key="k1")
    assert again.status_code == 200
    # `warnings` is about now (a worker that is just starting may not be listed yet), the rest
    # is the receipt itself.
    assert {**again.json(), "warnings": []} == {**receipt, "created": False, "warnings": []}

    before = await ledger_snapshot(pool)
    other = {"agent": "scripted", "input": [{"say": "bye"}]}
    conflict = await post(http, f"/v1/threads/{ids}/submissions", other, idempotency_key="k1")
    assert conflict.status_code == 409
    assert error_of(conflict)["code"] == "idempotency_conflict"

    done = await settled(http, receipt["submission_id"])
    assert (done["outcome"], done["result"]) == ("completed", {"said": ["hello"]})
    assert done["thread_id"] == ids and done["state"] == "settled"
    assert len((await ledger_snapshot(pool))[2]) == len(before[2])  # no submission added


async def test_api_reads_a_submission_a_thread_and_waits_for_a_result(
    worker: None, http: httpx.AsyncClient, ids: str
) -> None:
    asks = await post(
        http, f"/v1/threads/{ids}/submissions", {"agent": "scripted", "input": [{"approval": "x"}]}
    )
    submission_id = asks.json()["submission_id"]
    waiting = await state_of(http, submission_id, "approval")
    assert (waiting["state"], waiting["outcome"], waiting["result"]) == ("suspended", None, None)

    short = await http.get(f"/v1/submissions/{submission_id}/result", params={"wait": "0.2"})
    assert short.status_code == 202 and short.json()["waiting_for"] == "approval"

    thread = await http.get(f"/v1/threads/{ids}")
    assert thread.status_code == 200
    assert thread.json()["thread_id"] == ids and thread.json()["messages_sent"] == []
    assert [s["submission_id"] for s in thread.json()["submissions"]] == [submission_id]

    inbox = await http.get("/v1/inbox", params={"limit": 1000})
    assert inbox.status_code == 200
    assert [e["submission_id"] for e in inbox.json()["entries"]] == [submission_id]

    approved = await post(http, f"/v1/submissions/{submission_id}/approve", {})
    assert approved.status_code == 200 and approved.json()["changed"] is True
    waited = await http.get(f"/v1/submissions/{submission_id}/result", params={"wait": 30})
    assert waited.status_code == 200 and waited.json()["outcome"] == "completed"


async def test_api_decisions_repeat_conflict_and_record_the_operator(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    asks = await client.submit(ids, agent_id="scripted", input=[{"approval": "refund"}])
    await state_of(http, asks.submission_id, "approval")
    path = f"/v1/submissions/{asks.submission_id}"

    denied = await post(http, f"{path}/deny", {"reason": "too much"})
    assert denied.status_code == 200
    assert denied.json() | {"changed": True, "operator": "local"} == denied.json()
    repeated = await post(http, f"{path}/deny", {"reason": "too much"})
    assert repeated.status_code == 200 and repeated.json()["changed"] is False
    conflict = await post(http, f"{path}/approve", {})
    assert conflict.status_code == 409 and error_of(conflict)["code"] == "decision_conflict"
    not_waiting = await post(http, f"{path}/answer", {"value": "L"})
    assert not_waiting.status_code == 409 and error_of(not_waiting)["code"] == "not_waiting"
    [decision] = [r for r in await client.records(ids) if r["kind"] == "approval-decision"]
    assert decision["body"] == {"approved": False, "reason": "too much", "operator": "local"}

    sizes = {"type": "string", "enum": ["S", "M", "L"]}
    question = await client.submit(
        ids, agent_id="scripted", input=[{"ask": {"q": "size?"}, "schema": sizes}]
    )
    await state_of(http, question.submission_id, "input")
    wrong = await post(http, f"/v1/submissions/{question.submission_id}/answer", {"value": "XL"})
    assert wrong.status_code == 400 and error_of(wrong)["field"] == "value"
    answered = await post(http, f"/v1/submissions/{question.submission_id}/answer", {"value": "L"})
    assert answered.status_code == 200
    assert (await settled(http, question.submission_id))["result"]["answers"] == ["L"]


async def test_api_resolves_an_unknown_side_effect(
    http: httpx.AsyncClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    submission_id = await unknown_side_effect(pool, ids)
    path = f"/v1/submissions/{submission_id}/resolve"
    bad = await post(http, path, {"outcome": "maybe"})
    assert bad.status_code == 400 and error_of(bad)["field"] == "outcome"
    resolved = await post(http, path, {"outcome": "ran", "result": {"charged": 5}})
    assert resolved.status_code == 200 and resolved.json()["changed"] is True
    assert resolved.json()["state"] == "input-applied"  # its next attempt records the result


async def test_api_abort_stops_a_running_submission_at_its_next_step(
    worker: None, http: httpx.AsyncClient, ids: str
) -> None:
    running = await post(
        http, f"/v1/threads/{ids}/submissions", {"agent": "scripted", "input": SLOW}
    )
    submission_id = running.json()["submission_id"]
    await state_of(http, submission_id, "running")
    aborted = await post(http, f"/v1/submissions/{submission_id}/abort", {})
    assert aborted.status_code == 200 and aborted.json()["state"] == "running"
    assert (await settled(http, submission_id))["outcome"] == "aborted"
    again = await post(http, f"/v1/submissions/{submission_id}/abort", {})
    assert again.status_code == 200 and again.json()["changed"] is False


async def test_if_busy_reject_refuses_while_a_submission_runs_or_waits_and_writes_nothing(
    worker: None, http: httpx.AsyncClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    submissions = f"/v1/threads/{ids}/submissions"
    running = await post(http, submissions, {"agent": "scripted", "input": SLOW})
    await state_of(http, running.json()["submission_id"], "running")
    second = {"agent": "scripted", "input": [{"say": "me too"}], "if_busy": "reject"}
    refused = await post(http, submissions, second)
    assert refused.status_code == 409, refused.text
    assert error_of(refused)["code"] == "thread_busy"
    assert len((await ledger_snapshot(pool))[2]) == 1  # only the running one

    await post(http, f"/v1/submissions/{running.json()['submission_id']}/abort", {})
    await settled(http, running.json()["submission_id"])
    waits = await post(http, submissions, {"agent": "scripted", "input": [{"approval": "x"}]})
    await state_of(http, waits.json()["submission_id"], "approval")
    before = (await ledger_snapshot(pool))[2:4]  # its pass may still be finishing: hosts move
    refused = await post(http, submissions, second)
    assert refused.status_code == 409 and error_of(refused)["code"] == "thread_busy"
    assert (await ledger_snapshot(pool))[2:4] == before  # no submission, no record

    await post(http, f"/v1/submissions/{waits.json()['submission_id']}/deny", {})
    await settled(http, waits.json()["submission_id"])
    admitted = await post(http, submissions, second)  # idle now: admitted
    assert admitted.status_code == 201
    assert (await settled(http, admitted.json()["submission_id"]))["outcome"] == "completed"


async def test_if_busy_interrupt_aborts_a_waiting_one_at_once_and_runs_next(
    worker: None, http: httpx.AsyncClient, ids: str
) -> None:
    submissions = f"/v1/threads/{ids}/submissions"
    waits = await post(http, submissions, {"agent": "scripted", "input": [{"approval": "x"}]})
    queued = await post(http, submissions, {"agent": "scripted", "input": [{"say": "queued"}]})
    waiting_id, queued_id = waits.json()["submission_id"], queued.json()["submission_id"]
    await state_of(http, waiting_id, "approval")
    body = {"agent": "scripted", "input": [{"say": "instead"}], "if_busy": "interrupt"}
    interrupting = await post(http, submissions, body, idempotency_key="stop-1")
    assert interrupting.status_code == 201
    assert interrupting.json()["interrupted"] == [waiting_id, queued_id]
    for earlier in (waiting_id, queued_id):  # settled in the admission's transaction
        now = (await http.get(f"/v1/submissions/{earlier}")).json()
        assert (now["outcome"], now["interrupted_by"]) == (
            "aborted",
            interrupting.json()["submission_id"],
        )
        assert now["reason"] == f"interrupted by {interrupting.json()['submission_id']}"
    done = await settled(http, interrupting.json()["submission_id"])
    assert done["result"] == {"said": ["instead"]}
    repeat = await post(http, submissions, body, idempotency_key="stop-1")
    assert repeat.status_code == 200 and repeat.json()["interrupted"] == [waiting_id, queued_id]


async def test_if_busy_interrupt_stops_a_running_one_at_its_next_step_then_runs(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    submissions = f"/v1/threads/{ids}/submissions"
    running = await post(http, submissions, {"agent": "scripted", "input": SLOW})
    running_id = running.json()["submission_id"]
    await state_of(http, running_id, "running")
    body = {"agent": "scripted", "input": [{"say": "now"}], "if_busy": "interrupt"}
    interrupting = await post(http, submissions, body)
    assert interrupting.json()["interrupted"] == [running_id]
    stopped = await settled(http, running_id)
    interrupter = interrupting.json()["submission_id"]
    assert (stopped["outcome"], stopped["interrupted_by"]) == ("aborted", interrupter)
    assert stopped["reason"] == f"interrupted by {interrupter}"  # at its next step
    assert (await settled(http, interrupting.json()["submission_id"]))["outcome"] == "completed"
    said = [r["body"]["text"] for r in await client.records(ids) if r["kind"] == "message"]
    assert 1 <= len(said) < 20 and said[-1] == "now"  # it stopped before its end


async def test_an_unserved_agent_is_admitted_with_a_warning_the_console_shows(
    worker: None, http: httpx.AsyncClient, ids: str
) -> None:
    body = {"agent": "nobody-serves-me", "input": {}}
    admitted = await post(http, f"/v1/threads/{ids}/submissions", body)
    assert admitted.status_code == 201
    [warning] = admitted.json()["warnings"]
    assert warning.startswith("no worker serves agent nobody-serves-me")
    waiting = await state_of(http, admitted.json()["submission_id"], "binding")
    assert "no worker serves agent nobody-serves-me" in waiting["reason"]

    async def page() -> str:
        return (await http.get(f"/threads/{ids}")).text

    await eventually(page, lambda html: "no worker serves agent nobody-serves-me" in html)
