"""A fake Agents SDK `Model` for unit tests: a function of the input items answers each request
(as pydantic-ai's `FunctionModel` does), and every request's input is kept."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call
from agents.tool import Tool
from openai.types.responses.response_prompt_param import ResponsePromptParam

Reply = Callable[[list[dict[str, Any]]], list[TResponseOutputItem]]

__all__ = ["FakeModel", "assistant_message", "function_call", "last_tool_output"]


def last_tool_output(items: list[dict[str, Any]]) -> str | None:
    """The output of the last item when it is a tool call's output."""
    last = items[-1] if items else {}
    return str(last["output"]) if last.get("type") == "function_call_output" else None


class FakeModel(Model):
    """Answers with ``reply(input items)``; 20 input and 5 output tokens per request."""

    def __init__(self, reply: Reply, *, model: str = "fake") -> None:
        self.reply = reply
        self.model = model
        self.inputs: list[list[dict[str, Any]]] = []

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
        items: list[dict[str, Any]] = (
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [cast(dict[str, Any], item) for item in input]
        )
        self.inputs.append(items)
        usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
        return ModelResponse(output=self.reply(items), usage=usage, response_id=None)

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
        raise NotImplementedError
