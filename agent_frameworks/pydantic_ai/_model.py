"""The pydantic-ai model wrapped so that each request is one journal step of the attempt
(`AttemptContext.tool`). A model that can stream is asked with `request_stream`: the text of its
response goes to readers as it arrives (`AttemptContext.text_delta`), and the whole response is
journaled once, as a request's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import (
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelMessagesTypeAdapter,
    RunContext,
    UserError,
)
from pydantic_ai.exceptions import ModelAPIError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    SystemPromptPart,
    TextPart,
    TextPartDelta,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from threadwarden.agents._core.budget import spend
from threadwarden.agents._core.compaction import (
    HeldMemory,
    refusal,
    says_too_long,
    tokens,
    within_context,
)
from threadwarden.agents._core.errors import short
from threadwarden.agents._core.spans import model_span
from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.agents.pydantic_ai._memory import render_messages
from threadwarden.bindings import AttemptContext


class JournaledModel(WrapperModel):
    """A model whose every response is recorded (before it is used) as one journal step, and
    replayed from the journal on a re-run: a step once answered is never asked again.

    A request the model refuses for its length is recorded as a refusal (`refusal`); with the
    run's ``memory``, the thread is compacted and the request sent again, once, carrying the
    summary instead of the turns it folds in; else, or refused again, the run fails (`TooLong`).
    """

    def __init__(
        self,
        wrapped: Model,
        ctx: AttemptContext,
        memory: HeldMemory | None = None,
        *,
        live: bool = True,
    ) -> None:
        super().__init__(wrapped)
        self._ctx = ctx
        self._memory = memory
        self._live = live
        """Whether readers see its text as it arrives (not a summary's: it answers no one)."""

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        memory = self._memory

        def step() -> Awaitable[Any]:
            sent = messages if memory is None else memory.rewrite(messages)
            return self._step(sent, model_settings, model_request_parameters)

        recorded = await within_context(self.model_name, memory, step)
        (response,) = ModelMessagesTypeAdapter.validate_python([recorded["response"]])
        assert isinstance(response, ModelResponse)
        await spend(self._ctx, self.model_name, recorded["usage"])
        return response

    async def _step(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> Any:
        """One journal step: the model's response and usage as recorded (answered now, or
        replayed), or its refusal for the request's length."""

        async def ask(_: dict[str, Any]) -> Any:
            with model_span("pydantic-ai", self.model_name, self._ctx):
                try:
                    response = await self._ask(messages, model_settings, model_request_parameters)
                except ModelAPIError as error:
                    if not too_long(error):
                        raise
                    size = tokens(render_messages(_dumped(messages)))
                    return refusal(short(getattr(error, "body", None) or error), size)
            usage = response.usage
            return {
                "response": ModelMessagesTypeAdapter.dump_python([response], mode="json")[0],
                "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
            }

        args = {"model": self.model_name, "messages": len(messages)}
        return await self._ctx.tool(MODEL_TOOL, args, ask)

    async def _ask(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """The wrapped model's whole response: streamed when its text goes to readers and the
        model can stream, the text forwarded (`AttemptContext.text_delta`) as it arrives; else
        asked in one request (no reader would see the chunks: a structured output, a summary,
        the worker's live text off), unless the model can only stream."""
        forward = self._live and self._ctx.live_text and not structured(model_request_parameters)
        if streams(self.wrapped) and (forward or not answers_whole(self.wrapped)):
            opened = False
            try:
                async with self.wrapped.request_stream(
                    messages, model_settings, model_request_parameters
                ) as stream:
                    opened = True
                    async for event in stream:
                        if forward:
                            self._ctx.text_delta(text_of(event))
                    return stream.get()
            except NotImplementedError:
                if opened:
                    raise
                # nothing was sent: a model that answers whole responses only
        return await self.wrapped.request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        # A streamed run (`run_stream`, an `event_stream_handler`) would act on a response
        # before it is journaled; `request` streams the text to readers instead.
        raise UserError(
            "threadwarden agent bindings run agent.run and journal each whole response: no"
            " streamed run or event_stream_handler (readers get the text live: docs/agents.md,"
            " Streaming)"
        )
        yield  # pragma: no cover


def _dumped(messages: list[ModelMessage]) -> list[Any]:
    return list(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def too_long(error: ModelAPIError) -> bool:
    """Whether the model refused a request for its length (its context window)."""
    if isinstance(error, ModelContextWindowExceededError):
        return True
    return (
        isinstance(error, ModelHTTPError)
        and error.status_code in (400, 413)
        and (says_too_long(error.body) or says_too_long(error.message))
    )


async def summarize(model: JournaledModel, instructions: str, text: str) -> str:
    """One summary request (`threadwarden.agents._core.compaction.Ask`): a journaled model step."""
    request = ModelRequest(parts=[SystemPromptPart(instructions), UserPromptPart(text)])
    response = await model.request([request], None, ModelRequestParameters())
    return response.text or ""


def _answering(model: Model) -> Iterator[Model]:
    """The models that answer ``model``'s requests: itself, or under its wrappers, each of a
    `FallbackModel`'s."""
    if isinstance(model, WrapperModel):
        yield from _answering(model.wrapped)
    elif isinstance(model, FallbackModel):
        for inner in model.models:
            yield from _answering(inner)
    else:
        yield model


def streams(model: Model) -> bool:
    """Whether ``model`` can stream a response: a model with `request_stream` of its own,
    under its wrappers; a `FallbackModel` if each of its models can; pydantic-ai's
    `FunctionModel` only with a ``stream_function``."""
    return all(
        m.stream_function is not None
        if isinstance(m, FunctionModel)
        else type(m).request_stream is not Model.request_stream
        for m in _answering(model)
    )


def answers_whole(model: Model) -> bool:
    """Whether ``model`` can answer a request in one response: every model but pydantic-ai's
    `FunctionModel` without a ``function`` (under its wrappers, each of a `FallbackModel`'s)."""
    return all(m.function is not None for m in _answering(model) if isinstance(m, FunctionModel))


def structured(parameters: ModelRequestParameters) -> bool:
    """Whether the response's text may be a structured output (JSON, native or prompted
    output): not streamed to readers."""
    mode = parameters.output_mode
    return mode in ("native", "prompted") or (
        mode == "auto" and parameters.output_object is not None
    )


def text_of(event: ModelResponseStreamEvent) -> str:
    """The text a stream event adds to the response's text parts ("" for any other part)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""
