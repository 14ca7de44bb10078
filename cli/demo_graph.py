"""The demo's graph thread: a LangGraph `StateGraph` run as a threadwarden binding
(`threadwarden.agents.langgraph`), offline.

A tailor reserves a jacket, asks the customer which size (LangGraph's ``interrupt``: an inbox
question, which the demo answers) and ships it. The graph runs on a checkpointer in the ledger:
``reserve`` ran before the question and never runs again after the answer. Imported only by
`threadwarden.cli.demo_scenario`, and only when the demo runs: LangGraph is the ``langgraph``
extra.
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from threadwarden.agents.langgraph import graph_binding
from threadwarden.bindings import Binding

AGENT = "tailor"
ANSWER = "M"
"""The size the demo answers with."""


class Order(TypedDict, total=False):
    item: str
    reserved: bool
    size: str
    shipped: str


def reserve(state: Order) -> Order:
    return {"reserved": True}


def ask_size(state: Order) -> Order:
    return {"size": interrupt({"question": f"Which size of {state['item']}?"})}


def ship(state: Order) -> Order:
    return {"shipped": f"{state['item']} in size {state['size']}"}


def tailor_binding() -> Binding:
    """The demo's LangGraph binding, written as an application writes one."""
    builder = StateGraph(Order)
    builder.add_node("reserve", reserve)
    builder.add_node("ask_size", ask_size)
    builder.add_node("ship", ship)
    builder.add_edge(START, "reserve")
    builder.add_edge("reserve", "ask_size")
    builder.add_edge("ask_size", "ship")
    builder.add_edge("ship", END)
    return graph_binding(builder, agent_id=AGENT)
