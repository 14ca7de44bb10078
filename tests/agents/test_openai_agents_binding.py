"""OpenAI Agents SDK agents as bindings, driven by a fake `Model` on a real worker (issue 20
item 2): journaled model steps and tools, memory, approvals, handoffs, errors, digest."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from agents import Agent, function_tool, set_tracing_disabled
from pydantic import BaseModel

from tests.agents.conftest import AgentsWorker, head_in
from tests.helpers.agent_records import bodies, model_steps
from tests.helpers.fake_agents_model import (
    FakeModel,
    assistant_message,
    function_call,
    last_tool_output,
)
from threadwarden.agents.openai_agents import HANDOFF, TRANSCRIPT, agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput
from threadwarden.failpoints import Failpoints

set_tracing_disabled(True)  # tracing is the application's choice; these tests export nothing


def calling(tool: str, args: dict[str, Any]) -> FakeModel:
    """Calls ``tool`` once, then answers with what it returned."""

    def reply(items: list[dict[str, Any]]) -> list[Any]:
        output = last_tool_output(items)
        if output is None:
            return [function_call(tool, args, call_id=f"call-{tool}")]
        return [assistant_message(f"tool said: {output}")]

    return FakeModel(reply)


def support(model: FakeModel, ran: list[str], *, approval: bool = False) -> Agent[Any]:
    @function_tool(needs_approval=approval)
    def refund(cents: int) -> str:
        """Refund the customer."""
        ran.append(f"refund {cents}")
        return f"refunded {cents}"

    @function_tool
    def lookup(q: str) -> str:
        """Look an order up."""
        ran.append(f"lookup {q}")
        return f"order {q} shipped"

    return Agent(name="support", model=model, tools=[refund, lookup], instructions="Help.")


async def test_openai_agents_tool_turn_completes_with_journaled_steps(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    ran: list[str] = []
    model = calling("lookup", {"q": "7"})
    async with agents_worker(agent_binding(support(model, ran), idempotent_tools={"lookup"})):
        receipt = await client.submit(ids, agent_id="support", input="where is 7?")
        result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "tool said: order 7 shipped")
    records = await client.records(ids)
    assert [s["usage"] for s in model_steps(records)] == [
        {"input_tokens": 20, "output_tokens": 5}
    ] * 2
    (call,) = bodies(records, "tool-call", tool="lookup")
    assert (call["args"], call["side_effect"]) == ({"q": "7"}, False)
    assert (ran, len(model.inputs)) == (["lookup 7"], 2)
    assert bodies(records, TRANSCRIPT)


async def test_openai_agents_input_that_is_no_prompt_is_refused_with_a_reason(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    async with agents_worker(agent_binding(support(calling("lookup", {}), []))):
        receipt = await client.submit(ids, agent_id="support", input=["not", "a", "prompt"])
        result = await client.result(receipt.submission_id, timeout=30)
    assert result.outcome == "failed"
    assert result.reason is not None and result.reason.startswith("input: expected")


async def test_openai_agents_second_turn_carries_the_first_and_reruns_replay(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str, failpoints: Failpoints
) -> None:
    ran: list[str] = []
    model = calling("refund", {"cents": 5})
    # The first turn fails at its settlement once: its re-run replays every step.
    failpoints.arm("settle", raise_error=ConnectionResetError("db gone"), times=1)
    async with agents_worker(agent_binding(support(model, ran))):
        first = await client.submit(ids, agent_id="support", input="refund me")
        assert (await client.result(first.submission_id, timeout=30)).outcome == "completed"
        second = await client.submit(ids, agent_id="support", input="again")
        assert (await client.result(second.submission_id, timeout=30)).outcome == "completed"
    assert ran == ["refund 5", "refund 5"]  # once per turn, not again on the re-run
    assert len(model.inputs) == 4
    later = model.inputs[2]  # the second turn's first request
    prompts = [i.get("content") for i in later if i.get("role") == "user"]
    assert prompts == ["refund me", "again"]
    assert any(i.get("output") == "refunded 5" for i in later)


async def test_openai_agents_needs_approval_waits_approve_runs_once_deny_tells_the_model(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    ran: list[str] = []
    model = calling("refund", {"cents": 500})
    async with agents_worker(agent_binding(support(model, ran, approval=True))):
        approved = await client.submit(f"{ids}a", agent_id="support", input="refund 500")
        head = await head_in(client, f"{ids}a", "suspended")
        assert head.waiting_for == "approval"
        (asked,) = bodies(await client.records(f"{ids}a"), "approval-requested")
        assert asked["reason"] == 'tool refund wants to run with {"cents": 500}'
        await client.approve(approved.submission_id)
        assert (await client.result(approved.submission_id, timeout=30)).result == (
            "tool said: refunded 500"
        )
        denied = await client.submit(f"{ids}d", agent_id="support", input="refund 500")
        await head_in(client, f"{ids}d", "suspended")
        await client.deny(denied.submission_id, "ask a manager")
        result = await client.result(denied.submission_id, timeout=30)
    assert ran == ["refund 500"]
    assert (result.outcome, result.result) == (
        "completed",
        "tool said: The operator denied the call to refund: ask a manager",
    )
    assert len(model.inputs) == 4  # two per turn: the approval's re-run replayed the first


async def test_openai_agents_handoff_is_recorded_and_the_target_answers(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    billing = Agent(
        name="billing", model=FakeModel(lambda items: [assistant_message("billing here")])
    )
    triage_model = FakeModel(lambda items: [function_call("transfer_to_billing", {}, call_id="h1")])
    triage = Agent(name="triage", model=triage_model, handoffs=[billing])
    async with agents_worker(agent_binding(triage)):
        receipt = await client.submit(ids, agent_id="triage", input="my invoice")
        result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "billing here")
    records = await client.records(ids)
    assert bodies(records, HANDOFF) == [{"from": "triage", "to": "billing"}]
    assert [s["args"]["agent"] for s in bodies(records, "tool-call", tool="model-request")] == [
        "triage",
        "billing",
    ]


def _failing(error: Exception) -> FakeModel:
    def reply(items: list[dict[str, Any]]) -> list[Any]:
        raise error

    return FakeModel(reply)


def _status(code: int) -> openai.APIStatusError:
    """The error the OpenAI client raises for an HTTP ``code`` (built from its own transport's
    types)."""
    request = httpx2.Request("POST", "http://model/v1/chat/completions")
    response = httpx2.Response(code, request=request)
    return openai.APIStatusError("context too long", response=response, body=None)


async def test_openai_agents_errors_fail_with_reasons_or_retry(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    flaky: list[int] = []

    def overloaded(items: list[dict[str, Any]]) -> list[Any]:
        flaky.append(1)
        if len(flaky) == 1:
            raise _status(503)
        return [assistant_message("back")]

    class Weather(BaseModel):
        celsius: int

    agents = [
        Agent(name="rejected", model=_failing(_status(400))),
        Agent(
            name="looping",
            model=calling("lookup", {"q": "1"}),
            tools=support(FakeModel(lambda i: []), []).tools,
        ),
        Agent(
            name="invalid",
            model=FakeModel(lambda i: [assistant_message("not json")]),
            output_type=Weather,
        ),
        Agent(name="flaky", model=FakeModel(overloaded)),
    ]
    bindings = [agent_binding(a, max_turns=1) for a in agents]
    async with agents_worker(*bindings):
        results = {}
        for agent in agents:
            receipt = await client.submit(f"{ids}{agent.name}", agent_id=agent.name, input="go")
            results[agent.name] = await client.result(receipt.submission_id, timeout=30)
    assert results["rejected"].reason == (
        "model endpoint rejected the request: HTTP 400: context too long"
    )
    assert (results["looping"].reason or "").startswith("usage limit: Max turns (1) exceeded")
    assert (results["invalid"].reason or "").startswith("model output: ")
    assert (results["flaky"].outcome, results["flaky"].result, len(flaky)) == (
        "completed",
        "back",
        2,
    )


def test_openai_agents_digest_follows_the_definition_and_names_are_required() -> None:
    def make(instructions: str, *, model: str = "m") -> Agent[Any]:
        return Agent(
            name="a", model=FakeModel(lambda i: [], model=model), instructions=instructions
        )

    digests = {
        agent_binding(make("Help.")).digest,
        agent_binding(make("Help more.")).digest,
        agent_binding(make("Help.", model="m2")).digest,
        agent_binding(support(FakeModel(lambda i: []), [])).digest,
    }
    assert len(digests) == 4
    assert agent_binding(make("Help.")).digest == agent_binding(make("Help.")).digest
    with pytest.raises(InvalidInput, match="^agent.name: expected a named agent"):
        agent_binding(make("Help."), agent_id="")
