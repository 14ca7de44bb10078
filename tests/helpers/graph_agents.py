"""LangGraph graphs for end-to-end tests (``--bindings tests.helpers.graph_agents:bindings``).

``shop``: ``reserve`` → ``ask_size`` (an ``interrupt`` asking for the size) → ``ship``, the
issue's acceptance graph. ``till``: a model node (an offline chat model, `journaled`) and a
`ToolNode` with ``lookup`` (idempotent) and ``charge`` (a side effect). Nodes, tools and model
requests append one line per real run to ``$TW_TEST_TOOL_DIR/<name>``; the first run of
``<name>-<key>`` that ``TW_TEST_HOLD`` lists (comma-separated; the key is the item, the tool's
argument, or the tool call a model node asked for) holds, for the test to kill the worker
meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from threadwarden.agents.langgraph import graph_binding, journaled
from threadwarden.bindings import Binding

SHOP = "shop"
TILL = "till"


async def ran(name: str, key: object) -> None:
    """Count a real run of ``name``; its first run with ``key`` holds when the test asked."""
    folder = os.environ.get("TW_TEST_TOOL_DIR")
    if folder is None:
        return
    with (Path(folder) / name).open("a") as runs:
        runs.write("ran\n")
    marker = Path(folder) / f"{name}-{key}.held"
    if f"{name}-{key}" in os.environ.get("TW_TEST_HOLD", "").split(",") and not marker.exists():
        marker.touch()
        await asyncio.sleep(60)


class Order(TypedDict, total=False):
    item: str
    reserved: int
    size: str
    shipped: str


async def reserve(state: Order) -> Order:
    await ran("reserve", state["item"])
    return {"reserved": state.get("reserved", 0) + 1}


def ask_size(state: Order) -> Order:
    size = interrupt({"question": f"Which size of {state['item']}?", "choices": ["S", "M", "L"]})
    return {"size": size}


async def ship(state: Order) -> Order:
    await ran("ship", state["item"])
    return {"shipped": f"{state['item']} in {state['size']}"}


def shop() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Order)
    builder.add_node("reserve", reserve)
    builder.add_node("ask_size", ask_size)
    builder.add_node("ship", ship)
    builder.add_edge(START, "reserve")
    builder.add_edge("reserve", "ask_size")
    builder.add_edge("ask_size", "ship")
    builder.add_edge("ship", END)
    return builder


@tool
async def lookup(order: str) -> str:
    """Look an order up."""
    await ran("lookup", order)
    return f"order {order} is paid"


@tool
async def charge(cents: int) -> str:
    """Charge the customer."""
    await ran("charge", cents)
    return f"charged {cents}"


def reply(messages: list[BaseMessage]) -> AIMessage:
    """The script: ``call NAME ARG [NAME ARG...]`` asks for those tools one after the other;
    once all answered, it says their results."""
    asked = max(n for n, m in enumerate(messages) if isinstance(m, HumanMessage))
    words = str(messages[asked].content).split()[1:]
    calls = list(zip(words[::2], words[1::2], strict=True))
    results = [str(m.content) for m in messages[asked:] if isinstance(m, ToolMessage)]
    if len(results) == len(calls):
        return AIMessage(content="final: " + "; ".join(results))
    name, arg = calls[len(results)]
    args = {"cents": int(arg)} if name == "charge" else {"order": arg}
    call = {"name": name, "args": args, "id": f"call-{name}-{arg}", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call])


class ScriptedChat(BaseChatModel):
    """An offline chat model answering by `reply`; each real request counts as ``model``."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        raise NotImplementedError("the scripted chat model is async only")

    async def _agenerate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        await ran("model", len(messages))
        return ChatResult(generations=[ChatGeneration(message=reply(messages))])


chat = journaled(ScriptedChat())


async def model(state: MessagesState) -> dict[str, list[Any]]:
    """The model node: a journaled request, then (counted as ``model-node``, keyed by the tool
    call it asks for, or ``final``) the node's own work, which a test may hold."""
    answer = await chat.ainvoke(state["messages"])
    assert isinstance(answer, AIMessage)
    await ran("model-node", answer.tool_calls[0]["id"] if answer.tool_calls else "final")
    return {"messages": [answer]}


def till() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([lookup, charge]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder


def all_bindings() -> list[Binding]:
    return [
        graph_binding(shop(), agent_id=SHOP),
        graph_binding(till(), agent_id=TILL, idempotent_tools={"lookup"}),
    ]


bindings = all_bindings()
