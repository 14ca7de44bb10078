"""Delegation tools (issue 20 item 2, "welcome"): an agent's tool runs a request as a child
submission for another threadwarden agent through `ctx.call_agent`; the turn waits for the
child without a claim, and its model then sees the child's result."""

from __future__ import annotations

from typing import Any

from agents import Agent as SdkAgent
from agents import set_tracing_disabled
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.agents.conftest import AgentsWorker
from tests.helpers.agent_records import bodies
from tests.helpers.checks import converged
from tests.helpers.fake_agents_model import (
    FakeModel,
    assistant_message,
    function_call,
    last_tool_output,
)
from threadwarden.agents import openai_agents, pydantic_ai
from threadwarden.client.client import ThreadwardenClient

set_tracing_disabled(True)


def _researcher() -> Agent[None, str]:
    """The child: answers its prompt."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(p for p in messages[-1].parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[TextPart(f"researched {prompt.content}")])

    return Agent(FunctionModel(reply), name="researcher")


def _pydantic_planner(asked: list[int]) -> Agent[None, str]:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(1)
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(f"plan: {returned[0].model_response_str()}")])
        return ModelResponse(parts=[ToolCallPart("ask_researcher", {"request": "tides"})])

    return Agent(
        FunctionModel(reply),
        name="planner",
        tools=[pydantic_ai.delegation_tool("researcher")],
    )


def _sdk_planner() -> SdkAgent[Any]:
    def reply(items: list[dict[str, Any]]) -> list[Any]:
        output = last_tool_output(items)
        if output is None:
            return [function_call("ask_researcher", {"request": "tides"}, call_id="d1")]
        return [assistant_message(f"plan: {output}")]

    return SdkAgent(
        name="planner-oa",
        model=FakeModel(reply),
        tools=[openai_agents.delegation_tool("researcher")],
    )


async def _child_of(client: ThreadwardenClient, thread: str) -> Any:
    """The ``call-started`` body of the thread's one delegation, once both hosts went idle (a
    worker stopped mid-pass is slow to stop)."""
    (started,) = bodies(await client.records(thread), "call-started")
    for host in (thread, started["child_host_id"]):
        await converged(client, host)
    return started


async def test_pydantic_ai_delegation_tool_waits_for_the_child_and_uses_its_result(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    asked: list[int] = []
    planner = pydantic_ai.agent_binding(_pydantic_planner(asked))
    async with agents_worker(planner, pydantic_ai.agent_binding(_researcher())):
        receipt = await client.submit(ids, agent_id="planner", input="plan a sail")
        result = await client.result(receipt.submission_id, timeout=120)
        started = await _child_of(client, ids)
    assert (result.outcome, result.result) == ("completed", "plan: researched tides")
    assert started["agent_id"] == "researcher"
    child = await client.result(started["child_submission_id"], timeout=5)
    assert child.result == "researched tides"
    # The planner's first model step was replayed after the child settled: asked twice in all.
    assert len(asked) == 2
    assert len(bodies(await client.records(ids), "call-joined")) == 1


async def test_openai_agents_delegation_tool_waits_for_the_child_and_uses_its_result(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    planner = _sdk_planner()
    researcher = pydantic_ai.agent_binding(_researcher())
    async with agents_worker(openai_agents.agent_binding(planner), researcher):
        receipt = await client.submit(ids, agent_id="planner-oa", input="plan a sail")
        result = await client.result(receipt.submission_id, timeout=120)
        started = await _child_of(client, ids)
    assert (result.outcome, result.result) == ("completed", "plan: researched tides")
    assert started["agent_id"] == "researcher"
    assert isinstance(planner.model, FakeModel) and len(planner.model.inputs) == 2
