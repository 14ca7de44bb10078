"""Offline stand-ins for a model, so the example runs without an API key: both answer like a
tiny support model. A message about a refund asks for ``refund``, one naming an order (a number)
asks for the lookup tool, a tool's result is summed up, anything else is answered politely."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call
from agents.tool import Tool
from openai.types.responses.response_prompt_param import ResponsePromptParam
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
from pydantic_ai.models.function import AgentInfo, FunctionModel


def decide(prompt: str, lookup: str) -> tuple[str, dict[str, Any]] | str:
    """A tool call (name, args) for a new user message, or the text answer."""
    number = re.search(r"\d+", prompt)
    if "refund" in prompt.lower():
        return "refund", {"order": int(number.group()) if number else 0, "cents": 500}
    if number:
        return lookup, {"order": int(number.group())}
    return f"Happy to help: {prompt}"


def pydantic_ai_model() -> FunctionModel:
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

    return FunctionModel(reply, model_name="offline")


class OfflineModel(Model):
    """For the Agents SDK agent (tools: lookup_invoice, refund)."""

    model = "offline"

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last = dict(items[-1])
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        if last.get("type") == "function_call_output":
            output = [assistant_message(f"Done: {last['output']}")]
        else:
            decided = decide(str(last.get("content")), "lookup_invoice")
            if isinstance(decided, str):
                output = [assistant_message(decided)]
            else:
                call_id = f"call_{len(items)}"
                output = [function_call(decided[0], decided[1], call_id=call_id)]
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the offline model answers whole responses")
