"""`graph_binding` at load: what it refuses (one line naming the field), what makes its digest,
and how a submission's input becomes the graph's."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode

from tests.helpers.graph_agents import shop, till
from threadwarden.agents.langgraph import graph_binding, graph_input, journaled
from threadwarden.errors import InvalidInput


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        (lambda: shop().compile(checkpointer=InMemorySaver()), "without a checkpointer of its own"),
        (lambda: shop().compile(interrupt_before=["ship"]), "without interrupt_before"),
        (lambda: "reserve, ask_size, ship", "a langgraph StateGraph, got 'str'"),
    ],
)
def test_langgraph_binding_refuses_what_it_cannot_run(graph: Any, expected: str) -> None:
    with pytest.raises(InvalidInput, match=expected) as refused:
        graph_binding(graph(), agent_id="shop")
    assert str(refused.value).startswith("graph: expected ")
    with pytest.raises(InvalidInput, match="model: expected a LangChain chat model"):
        journaled(graph)


def test_langgraph_binding_digest_is_the_graphs_definition() -> None:
    digest = graph_binding(shop(), agent_id="shop").digest
    assert digest.startswith("langgraph-")
    assert graph_binding(shop().compile(), agent_id="shop").digest == digest  # compiled: same
    assert graph_binding(shop(), agent_id="other").digest == digest  # the id is not the graph

    rerouted = shop()
    rerouted.add_node("gift_wrap", lambda state: {})
    assert graph_binding(rerouted, agent_id="shop").digest != digest

    @tool
    def refund(cents: int) -> str:
        """Refund."""
        return "refunded"

    tooled = till()
    tooled.nodes["tools"].runnable = ToolNode([refund])
    assert (
        graph_binding(tooled, agent_id="till").digest
        != graph_binding(till(), agent_id="till").digest
    )


def test_langgraph_binding_input_is_the_graphs_or_a_human_message() -> None:
    assert graph_input({"item": "hat"}, messages=False) == {"item": "hat"}
    [said] = graph_input("hello", messages=True)["messages"]
    assert isinstance(said, HumanMessage) and said.content == "hello"
    with pytest.raises(
        InvalidInput, match="input: expected a JSON object of the graph's input keys, got"
    ):
        graph_input("hello", messages=False)
    with pytest.raises(InvalidInput, match="or a non-empty string"):
        graph_input(["hello"], messages=True)
