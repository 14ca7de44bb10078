"""pydantic-ai's deferred tool calls answered by people: a tool that needs approval
(``requires_approval``, `ApprovalRequired`) is one inbox wait each (`approve`), and a call that
deferred itself (`CallDeferred`) is a question whose answer is the call's result (``ctx.ask``),
in the model's order. The run's `HandleDeferredToolCalls` capability calls `deferred_handler`'s
handler, so the run never ends with deferred requests left open."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.messages import ToolCallPart
from pydantic_core import to_jsonable_python

from threadwarden.agents._core.approvals import approve
from threadwarden.bindings import AttemptContext

Decide = Callable[[RunContext[Any], DeferredToolRequests], Awaitable[DeferredToolResults]]
"""A handler of the run's deferred tool calls (`HandleDeferredToolCalls`)."""


def deferred_handler(ctx: AttemptContext) -> Decide:
    """The handler answering one attempt's deferred calls: approvals, then deferred calls."""

    async def decide(_: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults:
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:  # one inbox wait each, in the model's order
            denied = await approve(ctx, call.tool_name, call.args_as_dict())
            approvals[call.tool_call_id] = True if denied is None else ToolDenied(denied)
        answers: dict[str, Any] = {}
        for call in requests.calls:  # CallDeferred: a person gives the call's result
            answers[call.tool_call_id] = await ctx.ask(deferred_question(requests, call))
        return DeferredToolResults(approvals=approvals, calls=answers)

    return decide


def deferred_question(requests: DeferredToolRequests, call: ToolCallPart) -> dict[str, Any]:
    """What the inbox shows for a deferred call: the tool, its arguments, whether it asks a
    question or stands for work done outside the agent, and the tool's metadata."""
    question: dict[str, Any] = {
        "tool": call.tool_name,
        "args": to_jsonable_python(call.args_as_dict(), fallback=str),
        "kind": requests.kind(call.tool_call_id),
    }
    metadata = requests.metadata.get(call.tool_call_id)
    if metadata:
        question["metadata"] = to_jsonable_python(metadata, fallback=str)
    return question
