"""An order desk written with LangGraph, run by threadwarden:

    threadwarden worker --bindings orders:bindings       # from this folder

``orders`` reserves the item, asks the customer which size (``interrupt``: a question in the
inbox, answered with ``threadwarden answer``), then a clerk (a chat model, journaled) ships it
with the ``ship`` tool, a side effect. The clerk is an offline stand-in here; any LangChain chat
model (``ChatOpenAI``…) wrapped with ``journaled`` takes its place.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from threadwarden.agents.langgraph import graph_binding, journaled

SIZES = {"type": "string", "enum": ["S", "M", "L"]}


class Order(MessagesState, total=False):
    item: str
    reserved: bool
    size: str


@tool
def ship(item: str, size: str) -> str:
    """Ship the item in that size."""
    return f"Shipped {item} in size {size}"


class OfflineClerk(BaseChatModel):
    """Asks for ``ship`` with what the last message says, then repeats what it returned."""

    @property
    def _llm_type(self) -> str:
        return "offline-clerk"

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            said = AIMessage(content=str(last.content))
        else:
            item, size = str(last.content).split(" in size ")
            call = {"name": "ship", "args": {"item": item, "size": size}, "id": "ship-1"}
            said = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=said)])


clerk_model = journaled(OfflineClerk())


def reserve(state: Order) -> dict[str, Any]:
    return {"reserved": True}


def ask_size(state: Order) -> dict[str, Any]:
    size = interrupt({"question": f"Which size of {state['item']}?"}, response_schema=SIZES)
    return {"size": size, "messages": [("user", f"{state['item']} in size {size}")]}


async def clerk(state: Order) -> dict[str, Any]:
    return {"messages": [await clerk_model.ainvoke(state["messages"])]}


builder = StateGraph(Order)
builder.add_node("reserve", reserve)
builder.add_node("ask_size", ask_size)
builder.add_node("clerk", clerk)
builder.add_node("tools", ToolNode([ship]))
builder.add_edge(START, "reserve")
builder.add_edge("reserve", "ask_size")
builder.add_edge("ask_size", "clerk")
builder.add_conditional_edges("clerk", tools_condition)
builder.add_edge("tools", "clerk")

bindings = [graph_binding(builder, agent_id="orders")]
