"""The demo's agent thread: a pydantic-ai agent on an offline model (`FunctionModel`, no
network) run as a threadwarden binding (`threadwarden.agents.pydantic_ai`).

The customer asks for a refund. The model looks the order up (an idempotent tool), asks for the
refund (a side effect with ``requires_approval=True``: an inbox wait, which the demo approves)
and answers with what the refund tool returned: three model requests and two tools, each one
journal step (``tool-call``/``tool-result`` records) in the live feed. Imported only by
`threadwarden.cli.demo_scenario`, and only when the demo runs: pydantic-ai is the
``pydantic-ai`` extra.
"""

from __future__ import annotations

import re

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from threadwarden.agents.pydantic_ai import agent_binding
from threadwarden.bindings import Binding

AGENT = "concierge"
REFUND_CENTS = 500


def _order(messages: list[ModelMessage]) -> int:
    """The order number the customer named (0 when none)."""
    prompts = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    number = re.search(r"\d+", prompts[-1] if prompts else "")
    return int(number.group()) if number else 0


def _reply(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    """The offline model: look the order up, refund it, then say what the refund returned."""
    returned = {
        part.tool_name: part.model_response_str()
        for part in messages[-1].parts
        if isinstance(part, ToolReturnPart)
    }
    order = _order(messages)
    if "refund" in returned:
        return ModelResponse(parts=[TextPart(f"{returned['refund']}. Sorry about the damage!")])
    if "lookup_order" in returned:
        return ModelResponse(
            parts=[ToolCallPart("refund", {"order": order, "cents": REFUND_CENTS})]
        )
    return ModelResponse(parts=[ToolCallPart("lookup_order", {"order": order})])


def concierge() -> Agent[None, str]:
    """The demo's pydantic-ai agent, written as an application writes one."""
    agent = Agent(
        FunctionModel(_reply, model_name="offline"),
        name=AGENT,
        instructions="You help customers with their orders. Refunds need a manager.",
    )

    @agent.tool_plain
    def lookup_order(order: int) -> str:
        """Where an order is."""
        return f"order {order}: delivered on Monday"

    @agent.tool_plain(requires_approval=True)
    def refund(order: int, cents: int) -> str:
        """Refund an order (a person approves it first)."""
        return f"Refunded {cents} cents on order {order}"

    return agent


def concierge_binding() -> Binding:
    """The agent as a binding: the lookup may run twice, the refund is a side effect."""
    return agent_binding(concierge(), idempotent_tools={"lookup_order"})
