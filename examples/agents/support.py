"""A support desk with two agents, one per framework, run by threadwarden:

    threadwarden dev --bindings support:bindings      # from this folder

``support`` (pydantic-ai) looks orders up and refunds them; ``billing`` (OpenAI Agents SDK)
looks invoices up and refunds them. Lookups are idempotent; a refund is a side effect that a
person approves in the inbox. With ``OPENAI_API_KEY`` set both use a real model (``MODEL``,
default ``gpt-4o-mini``; ``OPENAI_BASE_URL`` for any OpenAI-compatible server); without it,
the offline models of offline.py answer. The Agents SDK's tracing, which sends traces to OpenAI,
stays on only for OpenAI itself: offline or with a local server it is turned off.
"""

from __future__ import annotations

import os

from agents import Agent as SdkAgent
from agents import Model, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from offline import agents_sdk_model, pydantic_ai_model
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models import Model as PaiModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from threadwarden.agents import openai_agents, pydantic_ai

REAL = bool(os.environ.get("OPENAI_API_KEY"))
MODEL = os.environ.get("MODEL", "gpt-4o-mini")
if not REAL or os.environ.get("OPENAI_BASE_URL"):
    set_tracing_disabled(True)  # not OpenAI's model: keep the Agents SDK's traces here


def _client() -> AsyncOpenAI:
    return AsyncOpenAI(base_url=os.environ.get("OPENAI_BASE_URL"))  # the key from the env


def _pydantic_ai_model() -> PaiModel:
    if REAL:
        return OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=_client()))
    return pydantic_ai_model()


def _sdk_model() -> Model:
    if REAL:
        return OpenAIChatCompletionsModel(MODEL, openai_client=_client())
    return agents_sdk_model()


support = Agent(
    _pydantic_ai_model(),
    name="support",
    instructions="You help customers with their orders. Refunds are 500 cents.",
)


@support.tool_plain
def lookup_order(order: int) -> str:
    """Where an order is."""
    return f"order {order} shipped on Monday"


@support.tool_plain(requires_approval=True)
def refund(order: int, cents: int) -> str:
    """Refund an order (a person approves it first)."""
    return f"refunded {cents} cents on order {order}"


@function_tool
def lookup_invoice(order: int) -> str:
    """An order's invoice."""
    return f"invoice for order {order}: 500 cents, paid"


@function_tool(name_override="refund", needs_approval=True)
def refund_invoice(order: int, cents: int) -> str:
    """Refund an invoice (a person approves it first)."""
    return f"refunded {cents} cents on invoice {order}"


billing = SdkAgent(
    name="billing",
    model=_sdk_model(),
    instructions="You answer questions about invoices. Refunds are 500 cents.",
    tools=[lookup_invoice, refund_invoice],
)

bindings = [
    pydantic_ai.agent_binding(support, idempotent_tools={"lookup_order"}),
    openai_agents.agent_binding(billing, idempotent_tools={"lookup_invoice"}),
]
