"""pydantic-ai agents as bindings, driven by `FunctionModel` on a real worker (issue 20 item 1).

Each test counts what the model function and the tools really saw: a step the journal already
answered is never asked again, and an approval, a denial or a re-run changes nothing that was
recorded.
"""

from __future__ import annotations

from typing import Any

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
from tests.helpers.agent_records import bodies, model_steps
from threadwarden.agents.pydantic_ai import TRANSCRIPT, agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints

Calls = list[list[ModelMessage]]


def _tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart)]


def calling(tool: str, args: dict[str, Any], seen: Calls) -> FunctionModel:
    """A model that calls ``tool`` once, then answers with what the tool returned."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        returns = _tool_returns(messages[-1:])
        if not returns:
            return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"call-{len(seen)}")])
        return ModelResponse(parts=[TextPart(f"tool said: {returns[0].model_response_str()}")])

    return FunctionModel(reply)


async def test_pydantic_ai_text_turn_completes_and_journals_its_model_step(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    seen: Calls = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("hello there")])

    agent = Agent(FunctionModel(reply), name="greeter", instructions="Be brief.")
    async with agents_worker(agent_binding(agent)):
        receipt = await client.submit(ids, agent_id="greeter", input={"prompt": "hi"})
        result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "hello there")
    records = await client.records(ids)
    (step,) = model_steps(records)
    assert step["response"]["parts"][0]["content"] == "hello there"
    assert step["usage"]["output_tokens"] > 0  # token usage is recorded with the step
    assert len(seen) == 1
    assert bodies(records, TRANSCRIPT), "the completed turn keeps its messages for memory"


async def test_pydantic_ai_input_that_is_no_prompt_is_refused_with_a_reason(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])), name="a")
    async with agents_worker(agent_binding(agent)):
        receipt = await client.submit(ids, agent_id="a", input={"text": "hi"})
        result = await client.result(receipt.submission_id, timeout=30)
    assert result.outcome == "failed"
    assert result.reason is not None and result.reason.startswith("input: expected")


async def test_pydantic_ai_second_turn_carries_the_first_as_message_history(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    seen: Calls = []
    agent = Agent(calling("lookup", {"q": "tea"}, seen), name="memo")

    @agent.tool_plain
    def lookup(q: str) -> str:
        return f"{q} is brewed"

    async with agents_worker(agent_binding(agent, idempotent_tools={"lookup"})):
        first = await client.submit(ids, agent_id="memo", input="first question")
        assert (await client.result(first.submission_id, timeout=30)).outcome == "completed"
        second = await client.submit(ids, agent_id="memo", input="second question")
        result = await client.result(second.submission_id, timeout=30)
    assert result.result == "tool said: tea is brewed"
    later = seen[2]  # the second turn's first request
    assert _prompts(later) == ["first question", "second question"]
    assert [r.content for r in _tool_returns(later)] == ["tea is brewed"]


async def test_pydantic_ai_tools_go_through_the_journal_as_side_effects_unless_idempotent(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    agent = Agent(calling("charge", {"cents": 5}, []), name="till")

    @agent.tool_plain
    def charge(cents: int) -> dict[str, int]:
        return {"charged": cents}

    other = Agent(calling("peek", {}, []), name="peeker")

    @other.tool_plain
    def peek() -> str:
        return "ok"

    async with agents_worker(agent_binding(agent), agent_binding(other, idempotent_tools=["peek"])):
        a = await client.submit(ids, agent_id="till", input="pay")
        b = await client.submit(f"{ids}b", agent_id="peeker", input="look")
        assert (await client.result(a.submission_id, timeout=30)).result == (
            'tool said: {"charged":5}'
        )
        assert (await client.result(b.submission_id, timeout=30)).outcome == "completed"
    (call,) = bodies(await client.records(ids), "tool-call", tool="charge")
    assert (call["args"], call["side_effect"]) == ({"cents": 5}, True)
    (looked,) = bodies(await client.records(f"{ids}b"), "tool-call", tool="peek")
    assert looked["side_effect"] is False


async def test_pydantic_ai_rerun_replays_recorded_steps_without_asking_the_model_again(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str, failpoints: Failpoints
) -> None:
    seen: Calls = []
    looked: list[str] = []
    agent = Agent(calling("lookup", {"q": "tea"}, seen), name="memo")

    @agent.tool_plain
    def lookup(q: str) -> str:
        looked.append(q)
        return f"{q} is brewed"

    # The first attempt runs every step, then fails at its settlement: the pass retries and
    # the re-run replays the model steps, the tool and the transcript from the journal.
    failpoints.arm("settle", raise_error=ConnectionResetError("db gone"), times=1)
    async with agents_worker(agent_binding(agent, idempotent_tools={"lookup"})):
        receipt = await client.submit(ids, agent_id="memo", input="q")
        result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "tool said: tea is brewed")
    assert failpoints.hits["settle"] == 1
    assert (len(seen), looked) == (2, ["tea"])
    assert (await client.thread_status(ids)).submissions[0].attempts == 2
