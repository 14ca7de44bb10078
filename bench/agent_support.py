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


def __getattr__(name: str) -> Any:
    if name == "bindings":
        agent = support_agent(os.environ["BENCH_MODEL_URL"])
        bindings: list[Binding] = [pydantic_ai.agent_binding(agent, idempotent_tools={"lookup"})]
        return bindings
    raise AttributeError(name)
