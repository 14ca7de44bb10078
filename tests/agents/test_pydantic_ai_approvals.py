"""pydantic-ai approvals as inbox waits (issue 20 item 1): ``requires_approval`` and a tool's own
`ApprovalRequired` suspend the submission with a reason naming the tool and its arguments;
approve runs the tool once, deny tells the model the operator's reason and the run completes."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, ApprovalRequired, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.agents.conftest import AgentsWorker
from tests.helpers.agent_records import bodies
from tests.helpers.polling import eventually
from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.client.client import ThreadwardenClient
from threadwarden.views import SubmissionView


class Refunds:
    """A model that asks for one refund, then reports what the tool returned; counts calls."""

    def __init__(self) -> None:
        self.requests = 0
        self.refunds: list[int] = []
        self.returned: list[str] = []

    def model(self) -> FunctionModel:
        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.requests += 1
            returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
            if not returns:
                call = ToolCallPart("refund", {"cents": 500}, tool_call_id="refund-1")
                return ModelResponse(parts=[call])
            self.returned.append(returns[0].model_response_str())
            return ModelResponse(parts=[TextPart(f"done: {returns[0].model_response_str()}")])

        return FunctionModel(reply)

    def declared(self) -> Agent[None, str]:
        agent = Agent(self.model(), name="refunds")

        @agent.tool_plain(requires_approval=True)
        def refund(cents: int) -> str:
            self.refunds.append(cents)
            return f"refunded {cents}"

        return agent

    def raising(self) -> Agent[None, str]:
        agent = Agent(self.model(), name="refunds")

        @agent.tool
        def refund(ctx: RunContext[Any], cents: int) -> str:
            if cents > 100 and not ctx.tool_call_approved:
                raise ApprovalRequired()
            self.refunds.append(cents)
            return f"refunded {cents}"

        return agent


async def _suspended(client: ThreadwardenClient, thread: str) -> SubmissionView:
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[0].state == "suspended",
        what=f"{thread} waits for approval",
    )
    return status.submissions[0]


async def _approve_and_finish(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str, agent: Agent[None, str]
) -> tuple[Any, list[dict[str, Any]]]:
    async with agents_worker(agent_binding(agent)):
        receipt = await client.submit(ids, agent_id="refunds", input="refund order 7")
        head = await _suspended(client, ids)
        assert head.waiting_for == "approval"
        (asked,) = bodies(await client.records(ids), "approval-requested")
        assert asked["reason"] == 'tool refund wants to run with {"cents": 500}'
        await client.approve(receipt.submission_id)
        result = await client.result(receipt.submission_id, timeout=30)
    return result, await client.records(ids)


async def test_pydantic_ai_requires_approval_waits_and_approve_runs_the_tool_once(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    refunds = Refunds()
    result, records = await _approve_and_finish(agents_worker, client, ids, refunds.declared())
    assert (result.outcome, result.result) == ("completed", "done: refunded 500")
    assert refunds.refunds == [500]
    # The re-run after the approval replayed the first model step: two requests in all.
    assert refunds.requests == 2
    assert len(bodies(records, "tool-result", tool="refund")) == 1


async def test_pydantic_ai_approval_required_raised_by_a_tool_waits_and_runs_once(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    refunds = Refunds()
    result, _ = await _approve_and_finish(agents_worker, client, ids, refunds.raising())
    assert result.result == "done: refunded 500"
    assert refunds.refunds == [500]
    assert refunds.requests == 2


async def test_pydantic_ai_deny_tells_the_model_the_reason_and_the_run_completes(
    agents_worker: AgentsWorker, client: ThreadwardenClient, ids: str
) -> None:
    refunds = Refunds()
    async with agents_worker(agent_binding(refunds.declared())):
        receipt = await client.submit(ids, agent_id="refunds", input="refund order 7")
        await _suspended(client, ids)
        denied = await client.deny(receipt.submission_id, "over the limit")
        assert denied.outcome is None  # not settled: the agent hears the denial
        result = await client.result(receipt.submission_id, timeout=30)
    assert result.outcome == "completed"
    assert refunds.refunds == []
    assert refunds.returned == ["The operator denied the call to refund: over the limit"]
    assert result.result == "done: The operator denied the call to refund: over the limit"
