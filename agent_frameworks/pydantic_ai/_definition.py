"""What defines a pydantic-ai agent for its digest, read through pydantic-ai's own
`FunctionModel`: one dry request shows the instructions, tools and output schema exactly as a
model would receive them, without calling any model."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_core import to_jsonable_python

from threadwarden.errors import InvalidInput


class _Read(Exception):
    """Stops the dry run once the definition was seen."""


def model_name(agent: Agent[Any, Any]) -> str:
    """The agent's model as ``system:name`` (or the model string it was given)."""
    model = agent.model
    if model is None:
        raise InvalidInput("agent.model", "an agent with a model (Agent(model, ...))")
    if isinstance(model, Model):
        return f"{model.system}:{model.model_name}"
    return str(model)


def _tool(definition: ToolDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "description": definition.description,
        "parameters": definition.parameters_json_schema,
        "kind": definition.kind,
        "strict": definition.strict,
    }


def read_definition(agent: Agent[Any, Any]) -> dict[str, Any]:
    """Model name, instructions, tools with their schemas and the output type of ``agent``."""
    seen: list[AgentInfo] = []

    def capture(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        raise _Read

    async def dry_run() -> None:
        with agent.override(model=FunctionModel(capture)), contextlib.suppress(_Read):
            await agent.run("(threadwarden reads the agent's definition)")

    # Its own thread and event loop: bindings load inside and outside a running loop.
    with ThreadPoolExecutor(1) as thread:
        error = thread.submit(asyncio.run, dry_run()).exception()
    if not seen:
        raise InvalidInput(
            "agent", "an agent whose definition a dry run can read (no deps needed)", error
        )
    info = seen[0]
    parameters = info.model_request_parameters
    return {
        "model": model_name(agent),
        "instructions": info.instructions,
        "tools": [_tool(t) for t in sorted(info.function_tools, key=lambda t: t.name)],
        "output": {
            "type": getattr(agent.output_type, "__name__", repr(agent.output_type)),
            "mode": parameters.output_mode,
            "tools": [_tool(t) for t in info.output_tools],
            "object": to_jsonable_python(parameters.output_object, fallback=repr),
            "text": info.allow_text_output,
        },
    }
