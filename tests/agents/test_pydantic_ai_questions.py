"""pydantic-ai's deferred tool calls as questions (issue 21 item 1): a tool that raises
`CallDeferred` suspends the turn with ``waiting_for: input``; the inbox shows the tool, its
arguments, the call's kind and metadata; the operator's answer becomes the tool's result, which
the model sees, and the run completes without asking the model again for answered steps."""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic_ai import Agent, CallDeferred
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.agents.conftest import AgentsWorker
from tests.helpers.agent_records import bodies
from tests.helpers.polling import eventually
from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.ledger.inbox import InboxReader


def tailor() -> tuple[Agent[None, str], list[str]]:
    """An agent whose tool asks the customer's size; the model reports what it was told."""
    asked: list[str] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append("request")
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            call = ToolCallPart("ask_size", {"item": "shirt"}, tool_call_id="size-1")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"ordering size {returns[0].model_response_str()}")])

    agent = Agent(FunctionModel(reply), name="tailor")

    @agent.tool_plain
    def ask_size(item: str) -> str:
        raise CallDeferred({"question": f"Which size of {item}?"}, kind="question")

    return agent, asked


async def test_pydantic_ai_call_deferred_waits_for_an_answer_that_the_model_sees(
    agents_worker: AgentsWorker, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    agent, asked = tailor()
    async with agents_worker(agent_binding(agent)):
        receipt = await client.submit(ids, agent_id="tailor", input="a shirt please")
        status = await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[0].waiting_for == "input",
            what="the turn waiting for an answer",
        )
        assert status.submissions[0].state == "suspended"
        question = {
            "tool": "ask_size",
            "args": {"item": "shirt"},
            "kind": "question",
            "metadata": {"question": "Which size of shirt?"},
        }
        assert bodies(await client.records(ids), "input-requested") == [{"payload": question}]
        [entry] = [
            e
            for e in (await InboxReader(pool).waiting(100)).entries
            if e.submission_id == receipt.submission_id
        ]
        assert (entry.waiting_for, entry.request) == ("input", {"payload": question})
        assert len(asked) == 1

        await client.answer(receipt.submission_id, "L")
        outcome = await client.result(receipt.submission_id, timeout=30)
    assert (outcome.outcome, outcome.result) == ("completed", "ordering size L")
    assert len(asked) == 2  # the first step was replayed from the journal, not asked again
    assert bodies(await client.records(ids), "input-answer") == [{"value": "L"}]
