"""A pydantic-ai tool that delegates to another threadwarden agent (`AttemptContext.call_agent`)."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Tool

from threadwarden.agents._core.delegation import delegate, delegation_name

DELEGATION = "threadwarden_delegation"
"""The tool metadata key naming the agent a delegation tool calls (such a tool is not wrapped in
``ctx.tool``: the delegation is a journal step of its own)."""


def delegation_tool(
    agent_id: str, *, description: str | None = None, budget: int | None = None
) -> Tool[Any]:
    """A tool ``ask_<agent_id>(request)`` that runs ``request`` as a child submission for
    ``agent_id`` on a thread of its own and returns its result to the model.

    The calling turn waits for the child without a claim (``waiting_for: child``) and runs
    again once it settled; a failed or aborted child comes back as text saying so. ``budget``
    reserves that many units for the child (a threadwarden agent binding spends tokens).
    """

    async def ask(request: str) -> Any:
        return await delegate(agent_id, request, budget)

    return Tool(
        ask,
        takes_ctx=False,
        name=delegation_name(agent_id),
        description=description or f"Ask the agent {agent_id}; returns its answer.",
        metadata={DELEGATION: agent_id},
    )
