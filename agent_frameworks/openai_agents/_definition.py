"""What defines an Agents SDK agent for its digest: model, instructions, tools with their
schemas, output type, and the same for every agent it can hand off to."""

from __future__ import annotations

from typing import Any

from agents import Agent, AgentOutputSchema, AgentOutputSchemaBase, FunctionTool

from threadwarden.agents.openai_agents._model import model_name
from threadwarden.errors import InvalidInput


def _instructions(agent: Agent[Any]) -> Any:
    value = agent.instructions
    if value is None or isinstance(value, str):
        return value
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', repr(value))}"


def _tool(tool: Any) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        approval = tool.needs_approval
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.params_json_schema,
            "needs_approval": approval if isinstance(approval, bool) else "callable",
        }
    return {"name": getattr(tool, "name", type(tool).__name__), "type": type(tool).__name__}


def read_definition(agent: Agent[Any]) -> dict[str, Any]:
    """The digest's input for ``agent``; refuses handoffs that are not agents."""
    seen: dict[str, dict[str, Any]] = {}

    def read(current: Agent[Any]) -> None:
        if current.name in seen:
            return
        output = current.output_type
        schema: Any = None
        if isinstance(output, AgentOutputSchemaBase):
            schema = output.json_schema()
        elif output not in (None, str):
            schema = AgentOutputSchema(output).json_schema()
        seen[current.name] = {
            "model": model_name(current.model),
            "instructions": _instructions(current),
            "tools": [_tool(t) for t in current.tools],
            "output": schema,
            "handoffs": [],
        }
        for target in current.handoffs:
            if not isinstance(target, Agent):
                raise InvalidInput(
                    f"agent {current.name}: handoffs",
                    "agents (a handoff() object's agent cannot be journaled)",
                    target,
                )
            seen[current.name]["handoffs"].append(target.name)
            read(target)

    read(agent)
    return {"root": agent.name, "agents": seen}
