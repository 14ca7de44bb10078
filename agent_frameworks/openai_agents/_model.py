"""The Agents SDK's model calls as journal steps: one `Model` for the whole run that answers
each request from the journal or, for a step never answered, from the current agent's own
model, and records the response before the run sees it. A model that streams is asked with
`stream_response`: the text of its response goes to readers as it arrives
(`AttemptContext.text_delta`), and the whole response is journaled once, as a request's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from agents import Agent, Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.run_config import CallModelData, ModelInputData
from agents.tool import Tool
from openai.types.responses import Response, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic import TypeAdapter

from threadwarden.agents._core.budget import spend
from threadwarden.agents._core.compaction import (
    HeldMemory,
    TooLong,
    refusal,
    refused,
    says_too_long,
    tokens,
    within_context,
)
from threadwarden.agents._core.errors import short
from threadwarden.agents._core.spans import model_span
from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.agents.openai_agents._memory import render_items
from threadwarden.bindings import AttemptContext

_OUTPUT: TypeAdapter[list[TResponseOutputItem]] = TypeAdapter(list[TResponseOutputItem])
T = TypeVar("T")


def model_name(model: str | Model | None) -> str:
    """A model's name for records and digests (``default`` when the agent names none)."""
    if model is None or isinstance(model, str):
        return model or "default"
    return str(getattr(model, "model", type(model).__name__))


def dump(response: ModelResponse) -> dict[str, Any]:
    """A response as the JSON recorded in its step."""
    usage = response.usage
    return {
        "output": [item.model_dump(mode="json", exclude_none=True) for item in response.output],
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        "response_id": response.response_id,
    }


def load(recorded: dict[str, Any]) -> ModelResponse:
    """The response a recorded step holds."""
    usage = recorded["usage"]
    return ModelResponse(
        output=_OUTPUT.validate_python(recorded["output"]),
        usage=Usage(
            requests=1,
            input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"],
            total_tokens=usage["input_tokens"] + usage["output_tokens"],
        ),
        response_id=recorded.get("response_id"),
    )


TERMINAL_FAILURES = frozenset({"response.incomplete", "response.failed", "response.error", "error"})
"""Stream events that end a response without completing it."""


def with_usage(settings: ModelSettings) -> ModelSettings:
    """``settings`` asking a streamed Chat Completions response for its usage (its tokens are
    recorded and spent as a whole response's are), unless the application chose."""
    if settings.include_usage is not None:
        return settings
    return settings.resolve(ModelSettings(include_usage=True))


def completed(response: Response, done: list[TResponseOutputItem]) -> ModelResponse:
    """The `ModelResponse` of a stream's ``response.completed`` (its output, or the items the
    stream finished when a backend leaves that empty; its usage; its id, none for the
    placeholder of a Chat Completions model)."""
    usage = response.usage
    return ModelResponse(
        output=list(response.output) or list(done),
        usage=Usage(
            requests=1,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
        )
        if usage is not None
        else Usage(requests=1),
        response_id=None if response.id == FAKE_RESPONSES_ID else response.id,
    )


@dataclass(frozen=True)
class _Request:
    """One request's arguments, but its input (a retry after compaction sends another)."""

    system_instructions: str | None
    model_settings: ModelSettings
    tools: list[Tool]
    output_schema: AgentOutputSchemaBase | None
    handoffs: list[Handoff]
    tracing: ModelTracing
    previous_response_id: str | None = None
    conversation_id: str | None = None
    prompt: ResponsePromptParam | None = None

    def send(
        self,
        method: Callable[..., T],
        settings: ModelSettings,
        input: str | list[TResponseInputItem],
    ) -> T:
        """``method`` (a model's `get_response` or `stream_response`) asked this request."""
        return method(
            self.system_instructions,
            input,
            settings,
            self.tools,
            self.output_schema,
            self.handoffs,
            self.tracing,
            previous_response_id=self.previous_response_id,
            conversation_id=self.conversation_id,
            prompt=self.prompt,
        )

    def size(self, input: str | list[TResponseInputItem]) -> int:
        """The request's size in tokens, as the adapters estimate it."""
        shown = input if isinstance(input, str) else render_items(input)
        return tokens((self.system_instructions or "") + shown)


def too_long(error: Exception) -> bool:
    """Whether the endpoint refused a request for its length (its context window)."""
    return (
        isinstance(error, openai.APIStatusError)
        and error.status_code in (400, 413)
        and (getattr(error, "code", None) == "context_length_exceeded" or says_too_long(error))
    )


class JournaledModel(Model):
    """Every request of one attempt's run: replayed from the journal, or asked of the model of
    the agent the run is at (`note_agent` is the run's ``call_model_input_filter``).

    A request the model refuses for its length is recorded as a refusal; with the run's
    ``memory``, the thread is compacted and the request sent again, once, carrying the summary
    instead of the turns it folds in; else, or refused again, the run fails (`TooLong`)."""

    def __init__(
        self, ctx: AttemptContext, provider: ModelProvider, memory: HeldMemory | None = None
    ) -> None:
        self._ctx = ctx
        self._provider = provider
        self._agent: Agent[Any] | None = None
        self.memory = memory

    def note_agent(self, data: CallModelData[Any]) -> ModelInputData:
        """Remember which agent asks next; the input passes unchanged."""
        self._agent = data.agent
        return data.model_data

    def _model(self) -> tuple[str, Model]:
        assert self._agent is not None, "call_model_input_filter runs before each request"
        return self.resolve(self._agent.model)

    def resolve(self, chosen: str | Model | None) -> tuple[str, Model]:
        """A model's name and the model (a name is the provider's)."""
        if isinstance(chosen, Model):
            return model_name(chosen), chosen
        return model_name(chosen), self._provider.get_model(chosen)

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
        name, model = self._model()
        request = _Request(
            system_instructions,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id,
            conversation_id,
            prompt,
        )
        agent = self._agent.name if self._agent is not None else None
        memory = self.memory

        def carried() -> str | list[TResponseInputItem]:
            return input if memory is None or isinstance(input, str) else memory.rewrite(input)

        def step() -> Awaitable[Any]:
            return self.step(name, model, request, carried(), agent)

        recorded = await within_context(name, memory, step)
        await spend(self._ctx, name, recorded["usage"])
        return load(recorded)

    async def step(
        self,
        name: str,
        model: Model,
        request: _Request,
        input: str | list[TResponseInputItem],
        agent: str | None,
        *,
        live: bool = True,
    ) -> Any:
        """One journal step: the response as recorded (answered now, or replayed), or the
        model's refusal of the request for its length. Readers see its text as it arrives when
        ``live`` (not a summary's: it answers no one)."""
        output_schema = request.output_schema
        plain = output_schema is None or output_schema.is_plain_text()
        forward = live and self._ctx.live_text and plain

        def streamed() -> AsyncIterator[TResponseStreamEvent]:
            settings = with_usage(request.model_settings)
            return request.send(model.stream_response, settings, input)

        async def ask(_: dict[str, Any]) -> Any:
            with model_span("openai-agents", name, self._ctx):
                try:
                    # Streamed only for readers: no chunk parsing for a response none sees.
                    response = await self._streamed(streamed) if forward else None
                    if response is None:  # unseen, or a model that answers whole responses only
                        settings = request.model_settings
                        response = await request.send(model.get_response, settings, input)
                except openai.APIStatusError as error:
                    if not too_long(error):
                        raise
                    return refusal(short(error.message), request.size(input))
            return dump(response)

        return await self._ctx.tool(MODEL_TOOL, {"model": name, "agent": agent}, ask)

    async def summarize(self, chosen: str | Model | None, instructions: str, text: str) -> str:
        """One summary request (`threadwarden.agents._core.compaction.Ask`) to ``chosen``, a journal
        step of its own; `TooLong` when the model refuses it for its length."""
        name, model = self.resolve(chosen)
        request = _Request(instructions, ModelSettings(), [], None, [], ModelTracing.DISABLED)
        user: list[TResponseInputItem] = [{"role": "user", "content": text}]
        recorded = await self.step(name, model, request, user, None, live=False)
        if refused(recorded):
            raise TooLong(name, recorded["message"], recorded["tokens"])
        await spend(self._ctx, name, recorded["usage"])
        response = load(recorded)
        return "".join(
            part.text
            for item in response.output
            if isinstance(item, ResponseOutputMessage)
            for part in item.content
            if isinstance(part, ResponseOutputText)
        )

    async def _streamed(
        self, streamed: Callable[[], AsyncIterator[TResponseStreamEvent]]
    ) -> ModelResponse | None:
        """The response, streamed: its text deltas forwarded to readers as they arrive, the
        response built from the stream's ``response.completed`` as `Runner.run_streamed` builds
        it. None when the model does not stream (it raised `NotImplementedError` before any
        event)."""
        started = False
        done: list[TResponseOutputItem] = []
        try:
            async for event in streamed():
                started = True
                if event.type == "response.output_text.delta":
                    self._ctx.text_delta(event.delta)
                elif event.type == "response.output_item.done":
                    done.append(event.item)
                elif event.type == "response.completed":
                    return completed(event.response, done)
                elif event.type in TERMINAL_FAILURES:
                    raise ModelBehaviorError(f"the model's stream ended with {event.type}")
        except NotImplementedError:
            if started:
                raise
            return None
        raise ModelBehaviorError("the model's stream ended without response.completed")

    def stream_response(self, *_: Any, **__: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Refused: a streamed run would act on a response before it is journaled (`get_response`
        streams the text to readers instead)."""
        raise NotImplementedError("threadwarden journals whole responses: use Runner.run")
