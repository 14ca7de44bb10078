"""Agents that talk to the scripted chat server (tests/helpers/chat_server.py) through each
framework's real OpenAI client, for end-to-end tests.

In a test's own worker: ``pydantic_ai_bindings(server.url)`` or ``openai_agents_bindings``. In
a worker process: ``--bindings tests.helpers.model_agents:bindings`` with ``TW_TEST_MODEL_URL``
set. Tools append one line per
real run to ``$TW_TEST_TOOL_DIR/<tool>``; the first run with each result of a tool that
``TW_TEST_HOLD`` names (comma-separated) holds: the test kills the worker meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from threadwarden.agents import openai_agents, pydantic_ai
from threadwarden.bindings import Binding, Memory

PYDANTIC_AGENT = "support-pa"
OPENAI_AGENT = "support-oa"
REMEMBERING_AGENT = "support-pa-memory"
"""The pydantic-ai support agent with a small memory budget (`REMEMBERING`)."""
REMEMBERING = Memory(budget_tokens=300, keep_turns=1)
"""About 1,200 characters: a third turn of 400-character prompts summarizes the first."""
CLIENT_RETRIES = 1
"""The OpenAI client's own retries: a script needs 1 + this many 503s to get past them."""


async def run_tool(name: str, value: str) -> str:
    """Count a real run of tool ``name``; its first run with this ``value`` holds when the test
    asked for it."""
    folder = os.environ.get("TW_TEST_TOOL_DIR")
    if folder is not None:
        runs = Path(folder) / name
        with runs.open("a") as ledger:
            ledger.write("ran\n")
        marker = Path(folder) / f"{name}-{value}.held"
        if name in os.environ.get("TW_TEST_HOLD", "").split(",") and not marker.exists():
            marker.touch()
            await asyncio.sleep(60)
    return value


def openai_client(base_url: str) -> AsyncOpenAI:
    """The client every test agent uses: short timeouts, one retry of its own."""
    return AsyncOpenAI(
        base_url=base_url, api_key="test-key", max_retries=CLIENT_RETRIES, timeout=10
    )


def pydantic_agent(base_url: str) -> Agent[None, str]:
    """A support agent: a lookup (idempotent), a charge (a side effect), a refund (approval)."""
    model = OpenAIChatModel(
        "scripted", provider=OpenAIProvider(openai_client=openai_client(base_url))
    )
    agent = Agent(model, name=PYDANTIC_AGENT, instructions="Help the customer.")

    @agent.tool_plain
    async def lookup(q: str) -> str:
        """Look an order up."""
        return await run_tool("lookup", f"order {q} shipped")

    @agent.tool_plain
    async def charge(cents: int) -> str:
        """Charge the customer."""
        return await run_tool("charge", f"charged {cents}")

    @agent.tool_plain(requires_approval=True)
    async def refund(cents: int) -> str:
        """Refund the customer."""
        return await run_tool("refund", f"refunded {cents}")

    return agent


def pydantic_ai_bindings(base_url: str) -> list[Binding]:
    """The pydantic-ai support agent's binding (lookup is idempotent)."""
    return [pydantic_ai.agent_binding(pydantic_agent(base_url), idempotent_tools={"lookup"})]


def openai_agent(base_url: str) -> SdkAgent[Any]:
    """The same support agent written with the OpenAI Agents SDK."""

    @function_tool
    async def lookup(q: str) -> str:
        """Look an order up."""
        return await run_tool("lookup", f"order {q} shipped")

    @function_tool
    async def charge(cents: int) -> str:
        """Charge the customer."""
        return await run_tool("charge", f"charged {cents}")

    @function_tool(needs_approval=True)
    async def refund(cents: int) -> str:
        """Refund the customer."""
        return await run_tool("refund", f"refunded {cents}")

    model = OpenAIChatCompletionsModel("scripted", openai_client=openai_client(base_url))
    return SdkAgent(
        name=OPENAI_AGENT,
        model=model,
        instructions="Help the customer.",
        tools=[lookup, charge, refund],
    )


def openai_agents_bindings(base_url: str) -> list[Binding]:
    """The Agents SDK support agent's binding (lookup is idempotent)."""
    set_tracing_disabled(True)  # the application's choice; nothing to export to in tests
    return [openai_agents.agent_binding(openai_agent(base_url), idempotent_tools={"lookup"})]


def remembering_bindings(base_url: str) -> list[Binding]:
    """The pydantic-ai support agent under `REMEMBERING_AGENT`, with `REMEMBERING`."""
    agent = pydantic_agent(base_url)
    return [pydantic_ai.agent_binding(agent, agent_id=REMEMBERING_AGENT, memory=REMEMBERING)]


def all_bindings(base_url: str) -> list[Binding]:
    """Both support agents, and the pydantic-ai one with a memory budget."""
    return [
        *pydantic_ai_bindings(base_url),
        *openai_agents_bindings(base_url),
        *remembering_bindings(base_url),
    ]


@dataclass(frozen=True)
class Framework:
    """The support agent as written with one framework: its agent id and its bindings for a
    model server's URL (``name``: the test's id when a test runs once per framework)."""

    name: str
    agent_id: str
    bindings: Callable[[str], list[Binding]]


PYDANTIC_AI = Framework("pydantic-ai", PYDANTIC_AGENT, pydantic_ai_bindings)
OPENAI_AGENTS = Framework("openai-agents", OPENAI_AGENT, openai_agents_bindings)


def __getattr__(name: str) -> Any:
    # Read when a worker process loads this module.
    if name == "bindings":
        return all_bindings(os.environ["TW_TEST_MODEL_URL"])
    raise AttributeError(name)
