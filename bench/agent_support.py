"""The agent the agent shape measures: pydantic-ai's real `OpenAIChatModel` against the scripted
chat server (tests/helpers/chat_server.py), one idempotent tool. A unit is one turn
``call lookup {"q": …}``: 2 model requests and 1 tool call. The turn's answer, ``final: `` and
the tool's text, is `ANSWER_WORDS` words: the chat server streams it (``--stream``) a word per
chunk, `STREAM_DELAY_S` apart.

Worker processes load ``bench.agent_support:bindings`` with ``BENCH_MODEL_URL`` set.
"""

from __future__ import annotations

import os
from typing import Any

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from threadwarden.agents import pydantic_ai
from threadwarden.bindings import Binding

AGENT = "bench-support"
STREAM_DELAY_S = 0.02
"""``--stream``: the chat server's pause between the chunks of a streamed answer."""
SHIPPED = (
    "shipped on Monday by express courier and should reach the address on file within two"
    " working days"
)
"""What ``lookup`` says of every order, after ``order Q``."""
ANSWER_WORDS = 3 + len(SHIPPED.split())
"""Words of the turn's answer ``final: order Q shipped …``: the chunks it streams in."""


def support_agent(base_url: str) -> Agent[None, str]:
    """The measured agent, talking to ``base_url``."""
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name=AGENT, instructions="Help the customer.")

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look an order up."""
        return f"order {q} {SHIPPED}"

    return agent


def first_text(event: Any) -> bool:
    """Whether a pydantic-ai stream event carries text of the response (a chunk a reader would
    see: the bare agent's counterpart of threadwarden's first live-text event)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return bool(event.part.content)
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return bool(event.delta.content_delta)
    return False


def unit_prompt(thread: int, turn: int) -> str:
    """The user turn of one unit."""
    return f'call lookup {{"q": "{thread}-{turn}"}}'


WARM_UP = unit_prompt(-1, 0)
"""The user turn of each side's warm-up (not measured)."""


def _text(content: Any) -> str:
    """A chat message's content as text (a string, or a list of content parts)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def measured_requests(requests: list[dict[str, Any]]) -> int:
    """How many of the chat server's ``requests`` belong to measured turns (a warm-up turn's
    requests carry its user message)."""

    def warm(body: dict[str, Any]) -> bool:
        users = [m.get("content") for m in body.get("messages", []) if m.get("role") == "user"]
        return any(_text(content) == WARM_UP for content in users)

    return sum(not warm(body) for body in requests)


def __getattr__(name: str) -> Any:
    if name == "bindings":
        agent = support_agent(os.environ["BENCH_MODEL_URL"])
        bindings: list[Binding] = [pydantic_ai.agent_binding(agent, idempotent_tools={"lookup"})]
        return bindings
    raise AttributeError(name)
