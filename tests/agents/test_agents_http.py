"""Each framework's real OpenAI client over HTTP to the scripted chat server (issue 20 item 3):
pydantic-ai's `OpenAIChatModel` with `OpenAIProvider`, the Agents SDK's
`OpenAIChatCompletionsModel` with `AsyncOpenAI(base_url=...)`. Approval, denial, memory, 503s
past the client's retries, a 400 (workers SIGKILLed inside a tool: test_killed_workers.py). The
server's request log shows no model step asked twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agents.conftest import AgentsWorker, each_framework, head_in, tool_runs
from tests.helpers.chat_server import ChatServer
from tests.helpers.model_agents import CLIENT_RETRIES, OPENAI_AGENTS, PYDANTIC_AI, Framework
from threadwarden import Receipt
from threadwarden.client.client import ThreadwardenClient

REFUND = 'call refund {"cents": 500}'
pytestmark = each_framework(PYDANTIC_AI, OPENAI_AGENTS)


@pytest.fixture
async def support(
    framework: Framework, agents_worker: AgentsWorker, server: ChatServer
) -> AsyncIterator[Framework]:
    """The framework's support agent, served by a worker against the test's chat server."""
    async with agents_worker(*framework.bindings(server.url)):
        yield framework


@pytest.fixture
async def refund(support: Framework, client: ThreadwardenClient, ids: str) -> Receipt:
    """The support agent asked to refund 500 cents: the turn waits for approval of the call."""
    receipt = await client.submit(ids, agent_id=support.agent_id, input=REFUND)
    head = await head_in(client, ids, "suspended")
    assert head.waiting_for == "approval"
    return receipt


async def test_agents_http_approval_runs_the_refund_once(
    refund: Receipt, client: ThreadwardenClient, server: ChatServer, tools: Path
) -> None:
    await client.approve(refund.submission_id)
    result = await client.result(refund.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "final: refunded 500")
    assert tool_runs(tools, "refund") == 1
    assert len(server.requests) == 2  # the first step was replayed after the approval


async def test_agents_http_denial_reaches_the_model_and_completes(
    refund: Receipt, client: ThreadwardenClient, server: ChatServer, tools: Path
) -> None:
    await client.deny(refund.submission_id, "refunds need a manager")
    result = await client.result(refund.submission_id, timeout=30)
    denial = "The operator denied the call to refund: refunds need a manager"
    assert (result.outcome, result.result) == ("completed", f"final: {denial}")
    assert tool_runs(tools, "refund") == 0
    assert len(server.requests) == 2


async def test_agents_http_second_turn_request_carries_the_first(
    support: Framework,
    client: ThreadwardenClient,
    server: ChatServer,
    tools: Path,
    ids: str,
) -> None:
    first = await client.submit(ids, agent_id=support.agent_id, input='call lookup {"q": "7"}')
    assert (await client.result(first.submission_id, timeout=30)).result == (
        "final: order 7 shipped"
    )
    second = await client.submit(ids, agent_id=support.agent_id, input={"prompt": "thanks"})
    result = await client.result(second.submission_id, timeout=30)
    assert result.result == "echo: thanks"
    assert len(server.requests) == 3
    sent = [(m["role"], m.get("content")) for m in server.requests[2]["messages"]]
    assert ("user", 'call lookup {"q": "7"}') in sent
    assert ("tool", "order 7 shipped") in sent
    assert ("assistant", "final: order 7 shipped") in sent
    assert sent[-1] == ("user", "thanks")


async def test_agents_http_503_past_client_retries_then_completes(
    support: Framework,
    client: ThreadwardenClient,
    server: ChatServer,
    ids: str,
) -> None:
    server.fail_next(503, "overloaded", times=1 + CLIENT_RETRIES)
    receipt = await client.submit(ids, agent_id=support.agent_id, input="hello")
    result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", "echo: hello")
    assert server.statuses == [503] * (1 + CLIENT_RETRIES) + [200]
    assert (await client.thread_status(ids)).submissions[0].attempts == 2


async def test_agents_http_400_settles_failed_with_the_reason(
    support: Framework,
    client: ThreadwardenClient,
    server: ChatServer,
    ids: str,
) -> None:
    server.fail_next(400, "context too long")
    receipt = await client.submit(ids, agent_id=support.agent_id, input="hello")
    result = await client.result(receipt.submission_id, timeout=30)
    assert result.outcome == "failed"
    assert result.reason is not None
    assert "rejected the request: HTTP 400" in result.reason
    assert "context too long" in result.reason
    assert server.statuses == [400]
