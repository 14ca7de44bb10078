"""The agent the agent shape measures: pydantic-ai's real `OpenAIChatModel` against the scripted
chat server (tests/helpers/chat_server.py), one idempotent tool. A unit is one turn
``call lookup {"q": …}``: 2 model requests and 1 tool call.

Worker processes load ``bench.agent_support:bindings`` with ``BENCH_MODEL_URL`` set.
"""

from __future__ import annotations

import os
from typing import Any

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from threadwarden.agents import pydantic_ai
from threadwarden.bindings import Binding

AGENT = "bench-support"


def support_agent(base_url: str) -> Agent[None, str]:
    """The measured agent, talking to ``base_url``."""
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30)
    model = OpenAIChatModel("scripted", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name=AGENT, instructions="Help the customer.")

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look an order up."""
        return f"order {q} shipped"

    return agent


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
