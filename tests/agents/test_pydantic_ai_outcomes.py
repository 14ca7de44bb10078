"""What a pydantic-ai turn settles as (issue 20 item 1, docs/bindings.md "Errors"): text and
structured outputs, a rejected request, a usage limit and an invalid output settle ``failed`` with
the reason; an overloaded endpoint is `Retryable` and the submission completes on a later attempt;
token usage is spent from a delegation's budget."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from tests.agents.conftest import AgentsWorker
from tests.helpers.agent_records import model_steps
from tests.helpers.checks import converged
from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.reads import SubmissionResult


class Weather(BaseModel):
    city: str
    celsius: int


OneTurn = Callable[..., Awaitable[SubmissionResult]]


@pytest.fixture
def one_turn(agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str) -> OneTurn:
    """``await one_turn(agent, **options)``: the agent bound (with `agent_binding`'s options) on
    a worker, one turn of it on the test's thread, and its result."""

    async def run(agent: Agent[None, object], **options: Any) -> SubmissionResult:
        async with agents_worker(agent_binding(agent, **options)):
            receipt = await client.submit(ids, agent_id="agent", input="go")
            return await client.result(receipt.submission_id, timeout=30)

    return run


async def test_pydantic_ai_structured_output_completes_as_its_json(one_turn: OneTurn) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (output,) = info.output_tools
        return ModelResponse(parts=[ToolCallPart(output.name, {"city": "Oslo", "celsius": 3})])

    agent: Agent[None, object] = Agent(FunctionModel(reply), name="agent", output_type=Weather)
    result = await one_turn(agent)
    assert (result.outcome, result.result) == ("completed", {"city": "Oslo", "celsius": 3})


async def test_pydantic_ai_rejected_request_settles_failed_with_the_reason(
    one_turn: OneTurn,
) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(400, "fn", body={"error": "max_tokens too large"})

    result = await one_turn(Agent(FunctionModel(reply), name="agent"))
    assert result.outcome == "failed"
    assert result.reason == (
        "model fn rejected the request: HTTP 400: {'error': 'max_tokens too large'}"
    )


async def test_pydantic_ai_overloaded_endpoint_retries_the_pass_and_then_completes(
    one_turn: OneTurn, client: ThreadwardenClient, ids: str
) -> None:
    asked: list[int] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        if len(asked) <= 2:
            raise ModelHTTPError(503, "fn", body="overloaded")
        return ModelResponse(parts=[TextPart("back")])

    result = await one_turn(Agent(FunctionModel(reply), name="agent"))
    assert (result.outcome, result.result) == ("completed", "back")
    assert len(asked) == 3  # two attempts failed the pass (nothing settled), the third answered
    status = await client.thread_status(ids)
    assert status.submissions[0].attempts == 3


async def test_pydantic_ai_usage_limit_settles_failed_with_the_reason(one_turn: OneTurn) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("again", {})])

    agent: Agent[None, object] = Agent(FunctionModel(reply), name="agent")

    @agent.tool_plain
    def again() -> str:
        return "more"

    limits = UsageLimits(request_limit=2)
    result = await one_turn(agent, idempotent_tools={"again"}, usage_limits=limits)
    assert result.outcome == "failed"
    assert result.reason is not None and result.reason.startswith("usage limit: ")
    assert "request_limit of 2" in result.reason


async def test_pydantic_ai_output_failing_validation_settles_failed_with_the_reason(
    one_turn: OneTurn,
) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (output,) = info.output_tools
        return ModelResponse(parts=[ToolCallPart(output.name, {"city": "Oslo"})])

    agent: Agent[None, object] = Agent(FunctionModel(reply), name="agent", output_type=Weather)
    result = await one_turn(agent)
    assert result.outcome == "failed"
    assert result.reason is not None and result.reason.startswith("model output: ")
    assert "retries" in result.reason


async def test_pydantic_ai_tokens_are_spent_from_a_delegation_budget(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=30, output_tokens=12)
        return ModelResponse(parts=[TextPart("researched")], usage=usage)

    agent = Agent(FunctionModel(reply), name="researcher")
    call = {"call": {"agent": "researcher", "input": "find", "budget": 100}}
    async with agents_worker(agent_binding(agent)):
        receipt = await client.submit(ids, agent_id="scripted", input=[call])
        result = await client.result(receipt.submission_id, timeout=30)
        (child,) = result.result["children"]
        for host in (ids, child["thread"]):  # stop the worker only once both hosts went idle
            await converged(client, host)
    assert (child["outcome"], child["result"], child["budget_consumed"]) == (
        "completed",
        "researched",
        42,
    )
    child_records = await client.records(child["thread"])
    assert [s["usage"] for s in model_steps(child_records)] == [
        {"input_tokens": 30, "output_tokens": 12}
    ]


async def test_pydantic_ai_every_fallback_overloaded_is_retryable_not_failed(
    one_turn: OneTurn,
) -> None:
    asked: list[str] = []

    def overloaded(name: str) -> FunctionModel:
        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            asked.append(name)
            if len(asked) <= 2:  # both models of the first attempt: an exception group
                raise ModelHTTPError(503, name, body="overloaded")
            return ModelResponse(parts=[TextPart(f"{name} is back")])

        return FunctionModel(reply, model_name=name)

    model = FallbackModel(overloaded("first"), overloaded("second"))
    result = await one_turn(Agent(model, name="agent"))
    assert (result.outcome, result.result) == ("completed", "first is back")
    assert asked == ["first", "second", "first"]
