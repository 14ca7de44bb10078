"""The chaos run's framework agents: a pydantic-ai agent and an OpenAI Agents SDK agent on
offline models, run as threadwarden bindings in every chaos worker (``--bindings
chaos.agents:BINDINGS``, beside the built-in ``scripted`` agent).

Each turn's input is ``{"prompt": key}``. The model answers the turn's newest prompt the same
way whatever the conversation before it: a first request calls the idempotent tool ``lookup``
with ``{"key": key}``, the request after the tool's result answers ``answer for KEY: RESULT``.
So every turn is two model requests and one tool call (each a journal step), whatever worker
kills, database stops and failpoints happen in between, and its settlement is known in advance
(`chaos.planned.answer`).
"""

from __future__ import annotations

from typing import Any

from agents import Agent as SdkAgent
from agents import function_tool
from agents.testing import assistant_message, function_call
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

from chaos.planned import AGENT_TOOL as TOOL
from chaos.planned import OPENAI_AGENTS, PYDANTIC_AI, looked_up
from threadwarden.agents import openai_agents, pydantic_ai
from threadwarden.agents.openai_agents.testing import FunctionModel as SdkFunctionModel
from threadwarden.bindings import Binding


def _pydantic_ai_reply(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    """The turn's prompt (in the newest request) is its key; the tool's result (in the request
    after the lookup call, which names the key) is answered."""
    parts = messages[-1].parts
    returned = [p for p in parts if isinstance(p, ToolReturnPart)]
    if returned:
        (call,) = [p for p in messages[-2].parts if isinstance(p, ToolCallPart)]
        key = call.args_as_dict()["key"]
        return ModelResponse(parts=[TextPart(f"answer for {key}: {returned[0].content}")])
    key = next(str(p.content) for p in parts if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[ToolCallPart(TOOL, {"key": key})])


def _openai_agents_reply(items: list[dict[str, Any]]) -> list[Any]:
    prompts = [str(item["content"]) for item in items if item.get("role") == "user"]
    key = prompts[-1]
    last = items[-1]
    if last.get("type") == "function_call_output":
        return [assistant_message(f"answer for {key}: {last['output']}")]
    return [function_call(TOOL, {"key": key}, call_id=f"call_{len(items)}")]


def _pydantic_ai_agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_pydantic_ai_reply, model_name="chaos"), name=PYDANTIC_AI)

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        return looked_up(key)

    return agent


def _openai_agents_agent() -> SdkAgent[Any]:
    @function_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return looked_up(key)

    return SdkAgent(
        name=OPENAI_AGENTS,
        model=SdkFunctionModel(_openai_agents_reply, model="chaos"),
        tools=[lookup],
    )


BINDINGS: list[Binding] = [
    pydantic_ai.agent_binding(_pydantic_ai_agent(), idempotent_tools={TOOL}),
    openai_agents.agent_binding(_openai_agents_agent(), idempotent_tools={TOOL}),
]
