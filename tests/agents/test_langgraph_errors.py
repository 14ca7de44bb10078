"""A graph's errors per docs/agents.md "Errors": a node's own exception (or the recursion limit)
settles the turn ``failed`` with the reason; transient trouble (a connection error, an HTTP 429 or
5xx a node's client raised) is `Retryable`, the pass retries and the graph resumes from its last
checkpoint; threadwarden's own errors (a checkpoint save that failed) are never judged as the
graph's: they fail the pass, and the retry resumes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, StateGraph

from tests.agents.conftest import AgentsWorker
from tests.helpers.graph_agents import ran, shop
from tests.helpers.polling import eventually
from threadwarden.agents.langgraph import graph_binding
from threadwarden.agents.langgraph._errors import verdict
from threadwarden.bindings import Failed
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import Retryable, StaleAttempt
from threadwarden.failpoints import Failpoints


class HTTPError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class APIConnectionError(Exception):
    """Named as openai's is: transient by its name."""


@pytest.mark.parametrize(
    "error", [ConnectionError("reset"), HTTPError(429), HTTPError(503), APIConnectionError()]
)
def test_langgraph_errors_transient_trouble_is_retryable(error: Exception) -> None:
    with pytest.raises(Retryable):
        verdict(error)


def test_langgraph_errors_the_graphs_own_are_its_verdict_and_threadwardens_are_not() -> None:
    assert verdict(ValueError("no stock")) == Failed("graph raised ValueError: no stock")
    assert verdict(HTTPError(400)) == Failed("graph raised HTTPError: HTTP 400")
    failed = verdict(GraphRecursionError("Recursion limit of 25 reached"))
    assert failed is not None and failed.reason.startswith("graph: Recursion limit")
    assert verdict(StaleAttempt("fenced out")) is None  # raised again for the runtime


class Tries(TypedDict, total=False):
    item: str
    checked: int
    done: str


tries: dict[str, int] = {}


async def check(state: Tries) -> Tries:
    await ran("check", state["item"])
    return {"checked": 1}


async def flaky(state: Tries) -> Tries:
    tries[state["item"]] = tries.get(state["item"], 0) + 1
    if state["item"] == "broken":
        raise ValueError(f"no {state['item']} in stock")
    if tries[state["item"]] == 1:
        raise ConnectionError("connection reset by peer")
    return {"done": f"{state['item']} after {tries[state['item']]} tries"}


def graph() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Tries)
    builder.add_node("check", check)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "check")
    builder.add_edge("check", "flaky")
    builder.add_edge("flaky", END)
    return builder


async def test_langgraph_errors_a_transient_error_retries_from_the_checkpoint_a_node_error_fails(
    agents_worker: AgentsWorker, client: ThreadwardenClient, runs: Path, ids: str
) -> None:
    async with agents_worker(graph_binding(graph(), agent_id="flaky")):
        retried = await client.submit(ids, agent_id="flaky", input={"item": f"{ids}-hat"})
        broken = await client.submit(f"{ids}-b", agent_id="flaky", input={"item": "broken"})
        done = await client.result(retried.submission_id, timeout=60)
        failed = await client.result(broken.submission_id, timeout=60)
    assert (done.outcome, done.result["done"]) == ("completed", f"{ids}-hat after 2 tries")
    assert (runs / "check").read_text().count("ran") == 2  # once per turn: resumed after
    assert (failed.outcome, failed.reason) == (
        "failed",
        "graph raised ValueError: no broken in stock",
    )


async def test_langgraph_errors_a_fault_saving_a_checkpoint_fails_the_pass_not_the_turn(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    failpoints: Failpoints,
    runs: Path,
    ids: str,
) -> None:
    async with agents_worker(graph_binding(shop(), agent_id="shop")):
        order = await client.submit(ids, agent_id="shop", input={"item": "hat"})
        await eventually(
            lambda: client.thread_status(ids),
            lambda s: s.submissions[-1].waiting_for == "input",
            what="the question asked",
        )
        failpoints.arm("attempt:checkpoint", times=1)  # the answered run's first save fails
        await client.answer(order.submission_id, "S")
        done = await client.result(order.submission_id, timeout=60)
        [view] = (await client.thread_status(ids)).submissions
    assert (done.outcome, done.result["shipped"]) == ("completed", "hat in S")
    assert failpoints.hits["attempt:checkpoint"] == 1
    assert view.attempts == 3  # asked, answered and faulted, retried from the checkpoint
    assert (runs / "reserve").read_text().count("ran") == 1
