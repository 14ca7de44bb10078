"""The agent graph of one attempt: each agent (and each agent it hands off to) cloned with its
function tools running through ``ctx.tool``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from typing import Any

from agents import Agent, FunctionTool
from agents.tool_context import ToolContext
from pydantic_core import to_jsonable_python

from threadwarden.agents.openai_agents._delegation import is_delegation
from threadwarden.bindings import AttemptContext


def _args(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def journaled_tool(
    tool: FunctionTool, ctx: AttemptContext, idempotent: Collection[str]
) -> FunctionTool:
    """``tool`` with its invocation recorded (side effect unless idempotent) and replayed."""
    invoke = tool.on_invoke_tool

    async def journaled(tool_ctx: ToolContext[Any], arguments: str) -> Any:
        async def run(_: dict[str, Any]) -> Any:
            return to_jsonable_python(await invoke(tool_ctx, arguments), fallback=str)

        side_effect = tool.name not in idempotent
        return await ctx.tool(tool.name, _args(arguments), run, side_effect=side_effect)

    return dataclasses.replace(tool, on_invoke_tool=journaled)


def journaled_agents(
    agent: Agent[Any], ctx: AttemptContext, idempotent: Collection[str]
) -> Agent[Any]:
    """A clone of ``agent`` and of every agent it can hand off to, with journaled tools."""
    clones: dict[int, Agent[Any]] = {}

    def clone(original: Agent[Any]) -> Agent[Any]:
        if id(original) in clones:  # agents that hand back to each other
            return clones[id(original)]
        tools = [
            journaled_tool(t, ctx, idempotent)
            if isinstance(t, FunctionTool) and not is_delegation(t)
            else t
            for t in original.tools
        ]
        copy = original.clone(tools=tools, handoffs=[])
        clones[id(original)] = copy
        copy.handoffs = [clone(h) if isinstance(h, Agent) else h for h in original.handoffs]
        return copy

    return clone(agent)
