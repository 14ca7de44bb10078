"""The Agents SDK's model calls as journal steps: one `Model` for the whole run that answers
each request from the journal or, for a step never answered, from the current agent's own
model, and records the response before the run sees it. A model that streams is asked with
`stream_response`: the text of its response goes to readers as it arrives
(`AttemptContext.text_delta`), and the whole response is journaled once, as a request's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from agents import Agent, Model, ModelProvider, ModelResponse, ModelSettings, ModelTracing, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.run_config import CallModelData, ModelInputData
from agents.tool import Tool
from openai.types.responses import Response
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic import TypeAdapter

from threadwarden.agents._common import MODEL_TOOL, model_span, spend
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


class JournaledModel(Model):
    """Every request of one attempt's run: replayed from the journal, or asked of the model of
    the agent the run is at (`note_agent` is the run's ``call_model_input_filter``)."""

    def __init__(self, ctx: AttemptContext, provider: ModelProvider) -> None:
        self._ctx = ctx
        self._provider = provider
        self._agent: Agent[Any] | None = None

    def note_agent(self, data: CallModelData[Any]) -> ModelInputData:
        """Remember which agent asks next; the input passes unchanged."""
        self._agent = data.agent
        return data.model_data

    def _model(self) -> tuple[str, Model]:
        assert self._agent is not None, "call_model_input_filter runs before each request"
        chosen = self._agent.model
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

        def send(method: Callable[..., T], settings: ModelSettings) -> T:
            """``method`` (the model's `get_response` or `stream_response`) asked this request
            with ``settings``."""
            return method(
                system_instructions,
                input,
                settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        def streamed() -> AsyncIterator[TResponseStreamEvent]:
            return send(model.stream_response, with_usage(model_settings))

        forward = output_schema is None or output_schema.is_plain_text()

        async def ask(_: dict[str, Any]) -> Any:
            with model_span("openai-agents", name, self._ctx):
                response = await self._streamed(streamed, forward)
                if response is None:  # a model that answers whole responses only
                    response = await send(model.get_response, model_settings)
            return dump(response)

        agent = self._agent.name if self._agent is not None else None
        recorded = await self._ctx.tool(MODEL_TOOL, {"model": name, "agent": agent}, ask)
        await spend(self._ctx, name, recorded["usage"])
        return load(recorded)

    async def _streamed(
        self, streamed: Callable[[], AsyncIterator[TResponseStreamEvent]], forward: bool
    ) -> ModelResponse | None:
        """The response, streamed: its text deltas forwarded to readers as they arrive
        (``forward``: not a structured output), the response built from the stream's
        ``response.completed`` as `Runner.run_streamed` builds it. None when the model does not
        stream (it raised `NotImplementedError` before any event)."""
        started = False
        done: list[TResponseOutputItem] = []
        try:
            async for event in streamed():
                started = True
                if event.type == "response.output_text.delta" and forward:
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
