"""Delegation in the Agents SDK: a function tool that delegates to another threadwarden agent
(`AttemptContext.call_agent`, a child submission), and the run's own handoffs between its
agents, each recorded as a ``handoff`` record of the journal."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, RunHooks
from agents.tool_context import ToolContext

from threadwarden.agents._core.delegation import delegate, delegation_name
from threadwarden.bindings import AttemptContext

HANDOFF = "handoff"
"""The record kind of a handoff inside one run (``{"from", "to"}``)."""

_PARAMETERS = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "What to ask the agent."}},
    "required": ["request"],
    "additionalProperties": False,
}


def is_delegation(tool: FunctionTool) -> bool:
    """Whether ``tool`` delegates (it is not wrapped in ``ctx.tool``: the delegation is a
    journal step of its own)."""
    return getattr(tool.on_invoke_tool, "threadwarden_delegation", None) is not None


def delegation_tool(
    agent_id: str, *, description: str | None = None, budget: int | None = None
) -> FunctionTool:
    """A tool ``ask_<agent_id>(request)`` that runs ``request`` as a child submission for
    ``agent_id`` on a thread of its own and returns its result to the model.

    The calling turn waits for the child without a claim (``waiting_for: child``) and runs
    again once it settled; a failed or aborted child comes back as text saying so. ``budget``
    reserves that many units for the child.
    """

    async def invoke(_: ToolContext[Any], arguments: str) -> Any:
        request = json.loads(arguments or "{}").get("request", "")
        return await delegate(agent_id, str(request), budget)

    invoke.threadwarden_delegation = agent_id  # type: ignore[attr-defined]  # the marker is_delegation reads
    return FunctionTool(
        name=delegation_name(agent_id),
        description=description or f"Ask the agent {agent_id}; returns its answer.",
        params_json_schema=_PARAMETERS,
        on_invoke_tool=invoke,
    )


class Handoffs(RunHooks[Any]):
    """Records each handoff as a step of the journal."""

    def __init__(self, ctx: AttemptContext) -> None:
        self._ctx = ctx

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        await self._ctx.append(HANDOFF, {"from": from_agent.name, "to": to_agent.name})
