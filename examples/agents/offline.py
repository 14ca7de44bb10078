"""Offline stand-ins for a model, so the example runs without an API key: both answer like a
tiny support model. A message about a refund asks for ``refund``, one naming an order (a number)
asks for the lookup tool, a tool's result is summed up, anything else is answered politely."""

from __future__ import annotations

import re
from typing import Any

from agents.testing import assistant_message, function_call
from pydantic_ai.messages import (
    ModelMessage,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import (
    ModelResponse as PaiResponse,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.models.function import FunctionModel as PaiFunctionModel

from threadwarden.agents.openai_agents.testing import FunctionModel


def decide(prompt: str, lookup: str) -> tuple[str, dict[str, Any]] | str:
    """A tool call (name, args) for a new user message, or the text answer."""
    number = re.search(r"\d+", prompt)
    if "refund" in prompt.lower():
        return "refund", {"order": int(number.group()) if number else 0, "cents": 500}
    if number:
        return lookup, {"order": int(number.group())}
    return f"Happy to help: {prompt}"


def pydantic_ai_model() -> PaiFunctionModel:
    """For the pydantic-ai agent (tools: lookup_order, refund)."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> PaiResponse:
        parts = messages[-1].parts
        returned = [p for p in parts if isinstance(p, ToolReturnPart)]
        if returned:
            return PaiResponse(parts=[TextPart(f"Done: {returned[0].model_response_str()}")])
        prompt = next(str(p.content) for p in parts if isinstance(p, UserPromptPart))
        decided = decide(prompt, "lookup_order")
        if isinstance(decided, str):
            return PaiResponse(parts=[TextPart(decided)])
        return PaiResponse(parts=[ToolCallPart(decided[0], decided[1])])

    return PaiFunctionModel(reply, model_name="offline")


def agents_sdk_model() -> FunctionModel:
    """For the Agents SDK agent (tools: lookup_invoice, refund)."""

    def reply(items: list[dict[str, Any]]) -> list[Any]:
        last = items[-1]
        if last.get("type") == "function_call_output":
            return [assistant_message(f"Done: {last['output']}")]
        decided = decide(str(last.get("content")), "lookup_invoice")
        if isinstance(decided, str):
            return [assistant_message(decided)]
        return [function_call(decided[0], decided[1], call_id=f"call_{len(items)}")]

    return FunctionModel(reply, model="offline", tokens=(10, 5))
