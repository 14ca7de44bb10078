"""Long threads (docs/agents.md, "Long threads"): a thread longer than the model's context keeps
working, every earlier turn stays in the model's input verbatim or inside the summary that is,
and compaction adds records, never rewrites or deletes one.

Each turn's prompt carries a ``#N`` marker; the scripted server's summary answer keeps every
marker it was given, so "turn 0 is covered" reads as "``#0`` is in the request".
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.agents.conftest import AgentsWorker, WorkerProcess, each_framework
from tests.helpers.agent_records import bodies
from tests.helpers.chat_server import ChatServer, characters, summarizes
from tests.helpers.model_agents import (
    OPENAI_AGENTS,
    PYDANTIC_AI,
    Framework,
    openai_agent,
    pydantic_agent,
)
from tests.helpers.polling import eventually
from threadwarden.agents import openai_agents, pydantic_ai
from threadwarden.bindings import SUMMARY, Binding, Memory
from threadwarden.client.client import ThreadwardenClient

MEMORY_SPEC = "tests.helpers.model_agents:remembering"


@pytest.fixture(autouse=True)
def whole_answers(server: ChatServer) -> None:
    """Answers stream without pauses: these tests time nothing, they run many turns."""
    server.stream_delay_s = 0


def covers(body: dict[str, Any], turn: int) -> bool:
    """Whether a request holds turn ``turn``'s marker (in its prompt, or in a summary)."""
    return re.search(rf"#{turn}(?!\d)", json.dumps(body)) is not None


def bound(framework: Framework, url: str, memory: Memory) -> Binding:
    """The framework's support agent bound with ``memory``."""
    if framework is PYDANTIC_AI:
        return pydantic_ai.agent_binding(pydantic_agent(url), memory=memory)
    return openai_agents.agent_binding(openai_agent(url), memory=memory)


def prompt(turn: int, size: int) -> str:
    """Turn ``turn``'s prompt: its marker, padded to ``size`` characters."""
    head = f"#{turn} "
    return head + "x" * (size - len(head))


async def run_turns(
    client: ThreadwardenClient, thread: str, agent_id: str, turns: range, size: int
) -> list[Any]:
    """Submit ``turns`` at once (the thread runs them in order) and wait for each result."""
    receipts = [
        await client.submit(thread, agent_id=agent_id, input=prompt(n, size)) for n in turns
    ]
    return [await client.result(r.submission_id, timeout=120) for r in receipts]


def asked(server: ChatServer, which: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The answered requests ``which`` selects."""
    return [body for body in server.answered() if which(body)]


def conversation_requests(server: ChatServer) -> list[dict[str, Any]]:
    return asked(server, lambda body: not summarizes(body))


def summary_requests(server: ChatServer) -> list[dict[str, Any]]:
    return asked(server, summarizes)


@each_framework(PYDANTIC_AI, OPENAI_AGENTS)
async def test_a_budget_keeps_each_request_near_it_and_summarizes_each_turn_once(
    framework: Framework,
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    ids: str,
) -> None:
    budget = 1000  # tokens, about 4,000 characters; a turn adds about 800
    memory = Memory(budget_tokens=budget, keep_turns=2)
    async with agents_worker(bound(framework, server.url, memory)):
        results = await run_turns(client, ids, framework.agent_id, range(30), 400)
    assert [r.outcome for r in results] == ["completed"] * 30

    requests = conversation_requests(server)
    assert len(requests) == 30
    limit = budget * 4 * 1.1  # the estimate leaves out the instructions and the JSON around
    assert max(characters(body) for body in requests) <= limit
    assert all(covers(body, 0) for body in requests)  # turn 0, verbatim or summarized

    summaries = summary_requests(server)
    folded = [body["messages"][-1]["content"] for body in summaries]
    assert summaries and len(set(map(str, folded))) == len(folded)  # never asked twice
    records = await client.records(ids)
    written = bodies(records, SUMMARY)
    assert len(written) == len(summaries)
    assert [w["last"] for w in written] == sorted({w["last"] for w in written})
    # Compaction deleted nothing: every turn's own record is still there.
    transcript = pydantic_ai.TRANSCRIPT if framework is PYDANTIC_AI else openai_agents.TRANSCRIPT
    turns = [r["body"] for r in records if r["kind"] == transcript]
    assert len(turns) == 30
    assert all(covers(body, n) for n, body in enumerate(turns))


@each_framework(PYDANTIC_AI, OPENAI_AGENTS)
async def test_a_request_refused_for_its_length_is_summarized_and_sent_again(
    framework: Framework,
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    ids: str,
) -> None:
    server.context_limit = 9_000  # characters; each turn adds about 1,000
    async with agents_worker(bound(framework, server.url, Memory())):
        results = await run_turns(client, ids, framework.agent_id, range(20), 500)
    assert [r.outcome for r in results] == ["completed"] * 20
    refused = [b for b, s in zip(server.requests, server.statuses, strict=True) if s == 400]
    assert refused, "the thread outgrew the endpoint's context"
    last = conversation_requests(server)[-1]
    assert all(covers(last, n) for n in range(20))  # verbatim or summarized


async def test_a_turn_still_too_long_after_summarizing_fails_with_the_reason(
    agents_worker: AgentsWorker, client: ThreadwardenClient, server: ChatServer, ids: str
) -> None:
    server.context_limit = 2_000
    async with agents_worker(bound(PYDANTIC_AI, server.url, Memory())):
        (result,) = await run_turns(client, ids, PYDANTIC_AI.agent_id, range(1), 3_000)
    assert result.outcome == "failed"
    assert "context: model scripted refused a request" in (result.reason or "")
    assert "no earlier turn left to summarize" in (result.reason or "")


async def test_a_summary_answered_before_the_worker_died_is_never_asked_again(
    client: ThreadwardenClient,
    server: ChatServer,
    tools: Any,
    worker_processes: WorkerProcess,
    monkeypatch: pytest.MonkeyPatch,
    ids: str,
) -> None:
    monkeypatch.setenv("TW_TEST_MEMORY", json.dumps({"budget_tokens": 300, "keep_turns": 1}))
    async with worker_processes("w1", MEMORY_SPEC) as first:
        await run_turns(client, ids, PYDANTIC_AI.agent_id, range(2), 400)  # within the budget
        server.hold_after_summary = True  # the request after the next summary never answers
        receipt = await client.submit(ids, agent_id=PYDANTIC_AI.agent_id, input=prompt(2, 400))
        await eventually(
            lambda: asyncio.sleep(0, server.held),
            lambda held: held > 0,
            what="the turn's request after its summary held",
        )
        first.kill()
        await first.wait()
    server.hold_after_summary = False
    summaries = len(summary_requests(server))
    assert server.held == 1
    async with worker_processes("w2", MEMORY_SPEC):
        result = await client.result(receipt.submission_id, timeout=60)
    assert result.outcome == "completed"
    assert len(summary_requests(server)) == summaries == 1
    written = bodies(await client.records(ids), SUMMARY)
    assert len(written) == 1


async def test_a_long_thread_still_covers_its_first_turn(
    agents_worker: AgentsWorker, client: ThreadwardenClient, server: ChatServer, ids: str
) -> None:
    memory = Memory(budget_tokens=2_000, keep_turns=4)
    binding = dataclasses.replace(bound(PYDANTIC_AI, server.url, memory), inline=True)
    async with agents_worker(binding):
        results = await run_turns(client, ids, PYDANTIC_AI.agent_id, range(520), 40)
    assert {r.outcome for r in results} == {"completed"}
    last = conversation_requests(server)[-1]
    assert all(covers(last, n) for n in range(520))
