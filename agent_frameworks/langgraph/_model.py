"""`journaled(model)`: a LangChain chat model whose requests inside a graph's nodes are journal
steps (``tool-call``/``tool-result`` ``model-request`` records): a response is recorded before
the node uses it, and a node that runs again after a crash gets the recorded response instead
of asking the model twice. A model that streams is asked with ``_astream``: the text of its
chunks goes to readers as it arrives (`AttemptContext.text_delta`), and the chunks added up are
journaled once, as a whole response is; the node gets that message."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    message_chunk_to_message,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from threadwarden.agents._core.spans import model_span
from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.agents.langgraph._tools import current
from threadwarden.bindings import AttemptContext
from threadwarden.errors import InvalidInput


class JournaledChatModel(BaseChatModel):
    """``model`` with every async request inside a threadwarden attempt journaled; outside an
    attempt it is ``model`` itself."""

    model: BaseChatModel

    @property
    def _llm_type(self) -> str:
        return f"threadwarden-journaled-{self.model._llm_type}"

    @property
    def _name(self) -> str:
        return str(
            getattr(self.model, "model_name", None)
            or getattr(self.model, "model", None)
            or self.model._llm_type
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if current() is not None:  # a journal step is awaited: a node must be async
            raise InvalidInput("model", "an awaited request (ainvoke) inside a graph's node")
        return self.model._generate(messages, stop=stop, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        run = current()
        if run is None:
            return await self.model._agenerate(messages, stop=stop, **kwargs)
        ctx = run.ctx

        async def ask(_: dict[str, Any]) -> Any:
            with model_span("langgraph", self._name, ctx):
                # Streamed only for readers: no chunk parsing for a response none sees.
                if (
                    ctx.live_text
                    and not STRUCTURED.intersection(kwargs)
                    and streams(self.model, kwargs)
                ):
                    message = await self._streamed(ctx, messages, stop, kwargs)
                else:
                    result = await self.model._agenerate(messages, stop=stop, **kwargs)
                    message = result.generations[0].message
            usage = getattr(message, "usage_metadata", None) or {}
            return {
                "response": message_to_dict(message),
                "usage": {
                    "input_tokens": int(usage.get("input_tokens", 0)),
                    "output_tokens": int(usage.get("output_tokens", 0)),
                },
            }

        args = {"model": self._name, "messages": len(messages)}
        recorded = await ctx.tool(MODEL_TOOL, args, ask)
        (message,) = messages_from_dict([recorded["response"]])
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _streamed(
        self,
        ctx: AttemptContext,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
    ) -> BaseMessage:
        """The wrapped model's response, streamed: the text of each chunk forwarded to readers
        as it arrives, the chunks added up into the one message the node gets (as LangChain's
        own streamed ``ainvoke`` does)."""
        whole: ChatGenerationChunk | None = None
        async for chunk in self.model._astream(messages, stop=stop, **kwargs):
            ctx.text_delta(chunk.text)
            whole = chunk if whole is None else whole + chunk
        if whole is None:
            raise ValueError(f"model {self._name}: the stream ended without a chunk")
        message = message_chunk_to_message(whole.message)
        if whole.generation_info:  # LangChain's streamed call keeps it in the metadata too
            message.response_metadata = {**whole.generation_info, **message.response_metadata}
        return message

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The wrapped model's own tool binding, with its requests still journaled."""
        bound = self.model.bind_tools(tools, **kwargs)
        return self.bind(**getattr(bound, "kwargs", {}))


STRUCTURED = frozenset({"response_format", "ls_structured_output_format"})
"""Request arguments that make the response's text a structured output (JSON): not streamed."""


def streams(model: BaseChatModel, kwargs: dict[str, Any]) -> bool:
    """Whether ``model`` streams this request, as LangChain decides it for a streamed call: it
    implements streaming (``_astream`` or ``_stream``) and neither it nor the call turns it off
    (``disable_streaming``, ``streaming=False``, ``stream=False``)."""
    kind = type(model)
    if kind._astream is BaseChatModel._astream and kind._stream is BaseChatModel._stream:
        return False
    if model.disable_streaming is True or (
        model.disable_streaming == "tool_calling" and kwargs.get("tools")
    ):
        return False
    if "stream" in kwargs and not kwargs["stream"]:
        return False
    return not (
        "streaming" in model.model_fields_set and getattr(model, "streaming", None) is False
    )


def journaled(model: BaseChatModel) -> JournaledChatModel:
    """Wrap a LangChain chat model so that its requests inside a graph run by
    `graph_binding` are journal steps (call it with ``await model.ainvoke(...)`` in an async
    node)."""
    if not isinstance(model, BaseChatModel):
        raise InvalidInput("model", "a LangChain chat model (BaseChatModel)", type(model).__name__)
    return JournaledChatModel(model=model)
