"""A LangGraph agent that asks the scripted chat server (tests/helpers/chat_server.py) over
HTTP through the OpenAI client: a model node (`journaled`) and a `ToolNode` with ``lookup``.

LangGraph has no OpenAI client of its own (``langchain-openai`` is not a dependency): `OpenAIChat`
is a small LangChain chat model on ``openai.AsyncOpenAI``'s chat completions, whole
(``_agenerate``) or streamed (``_astream``, with the usage in its last chunk), as
``ChatOpenAI`` does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCall
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openai import AsyncOpenAI
from openai.types import CompletionUsage
from pydantic import ConfigDict

from tests.helpers.model_agents import openai_client, run_tool
from threadwarden.agents.langgraph import graph_binding, journaled
from threadwarden.bindings import Binding

GRAPH_AGENT = "support-lg"


class OpenAIChat(BaseChatModel):
    """Chat completions of ``client`` as a LangChain chat model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: AsyncOpenAI
    model_name: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "openai-chat-completions"

    def _request(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> dict[str, Any]:
        request = {"model": self.model_name, "messages": convert_to_openai_messages(messages)}
        return request | {k: v for k, v in kwargs.items() if k in ("tools", "tool_choice")}

    def _generate(self, *_: Any, **__: Any) -> ChatResult:
        raise NotImplementedError("an async model: ainvoke")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = await self.client.chat.completions.create(**self._request(messages, kwargs))
        message = answer.choices[0].message
        calls: list[ToolCall] = [
            {
                "name": c.function.name,
                "args": json.loads(c.function.arguments),
                "id": c.id,
                "type": "tool_call",
            }
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        reply = AIMessage(
            content=message.content or "", tool_calls=calls, usage_metadata=_usage(answer.usage)
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        stream = await self.client.chat.completions.create(
            **self._request(messages, kwargs),
            stream=True,
            stream_options={"include_usage": True},
        )
        async for event in stream:
            if event.usage is not None:  # the last chunk (stream_options.include_usage)
                chunk = AIMessageChunk(content="", usage_metadata=_usage(event.usage))
                yield ChatGenerationChunk(message=chunk)
            for choice in event.choices:
                delta = choice.delta
                calls = [
                    {
                        "index": c.index,
                        "id": c.id,
                        "name": c.function.name if c.function else None,
                        "args": c.function.arguments if c.function else None,
                    }
                    for c in delta.tool_calls or []
                ]
                chunk = AIMessageChunk(content=delta.content or "", tool_call_chunks=calls)
                yield ChatGenerationChunk(message=chunk)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def _usage(usage: CompletionUsage | None) -> UsageMetadata | None:
    if usage is None:
        return None
    return UsageMetadata(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
    )


@tool
async def lookup(q: str) -> str:
    """Look an order up."""
    return await run_tool("lookup", f"order {q} shipped")


def support_graph(base_url: str) -> StateGraph[Any, Any, Any, Any]:
    """The support agent as a graph: the model (journaled), then its tool calls, until it
    answers."""
    chat = journaled(OpenAIChat(client=openai_client(base_url))).bind_tools([lookup])

    async def model(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder


def langgraph_bindings(base_url: str) -> list[Binding]:
    """The graph's binding (lookup is idempotent)."""
    return [
        graph_binding(support_graph(base_url), agent_id=GRAPH_AGENT, idempotent_tools={"lookup"})
    ]
