"""A LangGraph thread that grows old (issue 37 item 5), on a real worker, through the OpenAI
client to the scripted chat server, many turns on one thread, each adding ~2 KB of
conversation. The checkpoints a turn saves hold what changed, not the whole state again: the
bytes a turn writes do not grow with the thread, and every earlier message still reaches the
model. A graph that summarizes its messages (docs/agents.md, "Long threads") also keeps what
its next turn reads and what its model is sent bounded, and every turn stays in the records."""

from __future__ import annotations

from typing import Any

import asyncpg
from langchain_core.messages import HumanMessage, RemoveMessage, SystemMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.agents.chat_graph import GRAPH_AGENT, OpenAIChat, langgraph_bindings
from tests.agents.conftest import AgentsWorker
from tests.helpers.chat_server import ChatServer
from tests.helpers.model_agents import openai_client
from threadwarden.agents.langgraph import UPDATE, graph_binding, journaled
from threadwarden.client.client import ThreadwardenClient
from threadwarden.ledger.checkpoints import CARRIED

WRITTEN = """
SELECT (SELECT sum(octet_length(data) + octet_length(meta::text))
          FROM threadwarden.checkpoints WHERE submission_id = $1),
       (SELECT sum(octet_length(body::text)) FROM threadwarden.records WHERE submission_id = $1)
"""
"""The bytes a submission saved as checkpoints (payload and description), and as records (its
model request, node updates and settlement, whose result is the turn's)."""


def turns(count: int) -> list[str]:
    return [f"turn {n}: " + "lorem-ipsum-" * 80 for n in range(count)]  # ~1 KB each way


async def run(client: ThreadwardenClient, thread: str, agent: str, said: list[str]) -> list[Any]:
    """Submit the turns on ``thread`` (they queue behind each other), each result once done."""
    receipts = [await client.submit(thread, agent_id=agent, input=text) for text in said]
    results = [await client.result(r.submission_id, timeout=60) for r in receipts]
    assert [r.outcome for r in results] == ["completed"] * len(said), results[-1]
    return results


async def test_langgraph_bytes_written_per_turn_do_not_grow_with_the_thread(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    said = turns(40)
    echoed = [f"echo: {text}" for text in said]
    server.stream_delay_s = 0
    async with agents_worker(*langgraph_bindings(server.url)):
        results = await run(client, ids, GRAPH_AGENT, said)

    written = [await pool.fetchrow(WRITTEN, r.submission_id) for r in results]
    for table, per_turn in zip(("checkpoints", "records"), zip(*written, strict=True), strict=True):
        first, last = sum(per_turn[:10]), sum(per_turn[-10:])
        assert last <= 1.1 * first, f"{table}: the first 10 turns {first} bytes, the last {last}"

    # Nothing was lost on the way: the last request holds every turn; each turn's result holds
    # the messages it added, not the thread's.
    sent = [m["content"] for m in server.requests[-1]["messages"]]
    assert (len(server.requests), sent[::2], sent[1::2]) == (len(said), said, echoed[:-1])
    assert [m["content"] for m in results[-1].result["messages"]] == [said[-1], echoed[-1]]


LONGEST, KEEP = 8, 4
"""The summarizing graph's messages: past LONGEST, all but the newest KEEP are summarized."""


class Chat(MessagesState, total=False):
    summary: str


def summarizing(base_url: str) -> StateGraph[Any, Any, Any, Any]:
    """The graph of docs/agents.md, "Long threads", on the scripted chat server."""
    model = journaled(OpenAIChat(client=openai_client(base_url)))

    async def summarize(state: Chat) -> dict[str, Any]:
        if len(state["messages"]) <= LONGEST:
            return {}
        old = state["messages"][:-KEEP]
        earlier = [SystemMessage(f"Earlier: {state['summary']}")] if "summary" in state else []
        ask = HumanMessage("Summarize the conversation above in a few lines.")
        summary = await model.ainvoke([*earlier, *old, ask])
        return {"summary": summary.content, "messages": [RemoveMessage(id=str(m.id)) for m in old]}

    async def respond(state: Chat) -> dict[str, Any]:
        earlier = [SystemMessage(f"Earlier: {state['summary']}")] if "summary" in state else []
        return {"messages": [await model.ainvoke([*earlier, *state["messages"]])]}

    builder = StateGraph(Chat)
    builder.add_node("summarize", summarize)
    builder.add_node("respond", respond)
    builder.add_edge(START, "summarize")
    builder.add_edge("summarize", "respond")
    builder.add_edge("respond", END)
    return builder


async def test_langgraph_summarizing_graph_reads_and_sends_a_bounded_state_and_keeps_every_turn(
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    said = turns(24)
    server.stream_delay_s = 0
    async with agents_worker(graph_binding(summarizing(server.url), agent_id="chat")):
        results = await run(client, ids, "chat", said)

    # The model is sent the summary and the newest messages, never the whole thread.
    assert max(len(r["messages"]) for r in server.requests) == 1 + LONGEST  # summary, newest
    last = server.requests[-1]["messages"]
    assert (
        last[0]["content"].startswith("Earlier: echo: Summarize")
        and last[-1]["content"] == said[-1]
    )
    summaries = [r for r in server.requests if "Summarize" in r["messages"][-1]["content"]]
    assert len(summaries) == len(said) // 3 - 1  # every third turn, from the fifth on
    # The next turn reads the chain since the newest summary: a few turns' rows, not every turn's.
    chain = await pool.fetch(CARRIED, ids, "none", "chat")
    assert chain[0]["meta"]["delta"] is False
    assert len(chain) <= 3 * 3  # three supersteps a turn, at most three turns since
    assert results[-1].result["summary"].startswith("echo: Summarize")
    # Summarizing removed messages from the state, not from the thread: each turn's answer
    # is a record still.
    records = await client.records(ids)
    answers = [
        r["body"]["update"]["messages"][0]["content"]
        for r in records
        if r["kind"] == UPDATE and r["body"]["node"] == "respond"
    ]
    assert answers == [f"echo: {text}" for text in said]
