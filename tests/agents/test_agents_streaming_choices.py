"""What each journaled model streams (issue 31), on a stand-in attempt context (no stack): the
text of a response, as its chunks arrive; a structured output, a model that cannot stream, and
any response while the worker's live text is off are asked whole (issue 39: no chunk parsing
for a response no reader sees). The journaled result is the same either way."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel, RunConfig, Runner
from agents.exceptions import ModelBehaviorError
from agents.models.multi_provider import MultiProvider
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGenerationChunk
from pydantic import BaseModel
from pydantic_ai import Agent, PromptedOutput
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.helpers.chat_server import ChatServer, words
from tests.helpers.fake_agents_model import FakeModel, assistant_message
from tests.helpers.graph_agents import ScriptedChat
from tests.helpers.model_agents import openai_client
from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.agents.langgraph import journaled
from threadwarden.agents.langgraph._tools import running
from threadwarden.agents.openai_agents._model import JournaledModel as SdkJournaledModel
from threadwarden.agents.pydantic_ai._model import JournaledModel
from threadwarden.bindings import AttemptContext


class Context:
    """The part of an attempt context the journaled models use: each ``tool`` step runs, its
    result kept (`results`); `deltas` are the live text forwarded."""

    budget_left = None
    live_text = True
    replaying = False
    submission_id = "sub_1"
    thread_id = "thread-1"

    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.results: list[Any] = []

    def text_delta(self, text: str) -> None:
        if text:
            self.deltas.append(text)

    async def tool(
        self, name: str, args: dict[str, Any], run: Callable[[Any], Awaitable[Any]], **_: Any
    ) -> Any:
        assert name == MODEL_TOOL
        self.results.append(await run(args))
        return self.results[-1]


def attempt(ctx: Context) -> AttemptContext:
    return cast(AttemptContext, ctx)


class City(BaseModel):
    name: str


async def pieces(text: str) -> AsyncIterator[str]:
    """``text`` four characters at a time, as a stream function yields it."""
    for n in range(0, len(text), 4):
        yield text[n : n + 4]


async def test_pydantic_ai_streams_text_not_structured_output_nor_an_unstreamed_model() -> None:
    def streamed(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        return pieces(
            '{"name": "Oslo"}' if info.model_request_parameters.output_object else "hello there"
        )

    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("hello there")])

    text = Context()
    agent: Agent[None, Any] = Agent(name="a")
    result = await agent.run(
        "hi", model=JournaledModel(FunctionModel(stream_function=streamed), attempt(text))
    )
    assert result.output == "hello there"
    assert text.deltas == ["hell", "o th", "ere"]
    assert text.results[0]["response"]["parts"][0]["content"] == "hello there"

    structured = Context()
    agent = Agent(name="a", output_type=PromptedOutput(City))
    model = JournaledModel(FunctionModel(stream_function=streamed), attempt(structured))
    assert (await agent.run("hi", model=model)).output == City(name="Oslo")
    assert structured.deltas == []  # JSON, valid once whole: its result is the settlement's

    unstreamed = Context()
    agent = Agent(name="a")
    result = await agent.run("hi", model=JournaledModel(FunctionModel(whole), attempt(unstreamed)))
    assert (result.output, unstreamed.deltas) == ("hello there", [])
    streamed_record, whole_record = text.results[0], unstreamed.results[0]
    assert streamed_record.keys() == whole_record.keys()  # one record shape: replay unchanged
    assert streamed_record["response"].keys() == whole_record["response"].keys()
    assert streamed_record["response"]["parts"] == whole_record["response"]["parts"]


async def test_openai_agents_streams_text_not_structured_output_nor_an_unstreamed_model(
    server: ChatServer,
) -> None:
    server.stream_delay_s = 0

    async def run(agent: SdkAgent[Any], ctx: Context) -> Any:
        model = SdkJournaledModel(attempt(ctx), MultiProvider())
        config = RunConfig(model=model, call_model_input_filter=model.note_agent)
        return (await Runner.run(agent, "say 5", run_config=config)).final_output

    chat = OpenAIChatCompletionsModel("scripted", openai_client=openai_client(server.url))
    text = Context()
    assert await run(SdkAgent(name="a", model=chat), text) == words(5)
    assert text.deltas == ["w1 ", "w2 ", "w3 ", "w4 ", "w5"]
    (recorded,) = text.results
    assert recorded["usage"] == {"input_tokens": 20, "output_tokens": 5}  # include_usage asked
    assert recorded["response_id"] is None  # as a whole Chat Completions response
    assert server.requests[0]["stream"] is True

    structured = Context()
    with contextlib.suppress(ModelBehaviorError):  # it answers text, not the JSON asked for
        await run(SdkAgent(name="a", model=chat, output_type=City), structured)
    assert structured.deltas == [] and len(structured.results) == 1

    unstreamed = Context()
    fake = FakeModel(lambda items: [assistant_message(words(5))])
    assert await run(SdkAgent(name="a", model=fake), unstreamed) == words(5)
    assert unstreamed.deltas == []


async def test_langgraph_streams_text_not_structured_output_nor_an_unstreamed_model() -> None:
    def fake() -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter([AIMessage(content=words(5))]))

    text = Context()
    with running(attempt(text)):
        answer = await journaled(fake()).ainvoke([HumanMessage("hi")])
    assert answer.content == words(5)
    assert "".join(text.deltas) == words(5) and len(text.deltas) >= 5
    (recorded,) = text.results
    assert recorded["response"]["type"] == "ai"  # the message, as a whole response's

    structured = Context()
    with running(attempt(structured)):
        bound = journaled(fake()).bind(response_format={"type": "json_object"})
        await bound.ainvoke([HumanMessage("hi")])
    assert structured.deltas == [] and len(structured.results) == 1

    unstreamed = Context()
    with running(attempt(unstreamed)):
        answer = await journaled(ScriptedChat()).ainvoke([HumanMessage("hi")])
    assert unstreamed.deltas == [] and len(unstreamed.results) == 1


STREAMED: list[str] = []
"""The requests `CountedChat` streamed."""


class CountedChat(GenericFakeChatModel):
    """LangChain's fake chat model, counting the requests it streamed (`STREAMED`)."""

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        STREAMED.append("langgraph")
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            yield chunk


async def test_with_live_text_off_each_adapter_asks_for_the_whole_response(
    server: ChatServer,
) -> None:
    """The worker's live text off: no adapter streams (the model answers whole), and the
    journaled response is the same text."""
    streamed: list[str] = []

    def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        streamed.append("pydantic-ai")
        return pieces("hello there")

    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("hello there")])

    off = Context()
    off.live_text = False
    model = JournaledModel(FunctionModel(whole, stream_function=stream), attempt(off))
    assert (await Agent(name="a").run("hi", model=model)).output == "hello there"
    on = Context()
    model = JournaledModel(FunctionModel(whole, stream_function=stream), attempt(on))
    assert (await Agent(name="a").run("hi", model=model)).output == "hello there"
    assert (streamed, off.deltas, on.deltas) == (["pydantic-ai"], [], ["hell", "o th", "ere"])

    server.stream_delay_s = 0
    chat = OpenAIChatCompletionsModel("scripted", openai_client=openai_client(server.url))
    sdk = SdkJournaledModel(attempt(off), MultiProvider())
    config = RunConfig(model=sdk, call_model_input_filter=sdk.note_agent)
    answer = await Runner.run(SdkAgent(name="a", model=chat), "say 5", run_config=config)
    assert answer.final_output == words(5)
    assert server.requests[-1].get("stream") in (None, False) and off.deltas == []

    with running(attempt(off)):
        fake = CountedChat(messages=iter([AIMessage(content=words(5))]))
        assert (await journaled(fake).ainvoke([HumanMessage("hi")])).content == words(5)
    with running(attempt(on)):
        fake = CountedChat(messages=iter([AIMessage(content=words(5))]))
        assert (await journaled(fake).ainvoke([HumanMessage("hi")])).content == words(5)
    assert STREAMED == ["langgraph"] and off.deltas == []
