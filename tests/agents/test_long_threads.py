"""Long threads (docs/agents.md, "Long threads"): a thread longer than the model's context keeps
working, every earlier turn stays in the model's input verbatim or inside the summary that is,
and compaction adds records, never rewrites or deletes one.

Each turn's prompt carries a ``#N`` marker; the scripted server's summary answer keeps every
marker it was given, so "turn 0 is covered" reads as "``#0`` is in the request".
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from tests.agents.conftest import AgentsWorker, each_framework
from tests.helpers.agent_records import bodies
from tests.helpers.chat_server import ChatServer, characters, summarizes
from tests.helpers.long_thread import seed_turns
from tests.helpers.model_agents import (
    OPENAI_AGENTS,
    PYDANTIC_AI,
    Framework,
    openai_agent,
    pydantic_agent,
)
from threadwarden.activities.live_text import FIRST_S
from threadwarden.agents import openai_agents, pydantic_ai
from threadwarden.agents._core.compaction import Compactor, recall
from threadwarden.bindings import SUMMARY, Binding, Memory, ThreadRecord
from threadwarden.client.client import ThreadwardenClient
from threadwarden.errors import InvalidInput
from threadwarden.ledger.records import appended
from threadwarden.reading.text import TextDelta


@pytest.fixture(autouse=True)
def whole_answers(server: ChatServer) -> None:
    """Answers stream without pauses but one after their first word, past the worker's wait
    for a step's first fragment (`FIRST_S`): these tests time nothing and run many turns, but
    read what readers see live."""
    server.stream_delay_s = 0
    server.first_pause_s = 3 * FIRST_S


def covers(body: dict[str, Any], turn: int) -> bool:
    """Whether a request holds turn ``turn``'s marker (in its prompt, or in a summary)."""
    return re.search(rf"#{turn}(?!\d)", json.dumps(body)) is not None


def bound(framework: Framework, url: str, memory: Memory | None) -> Binding:
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


async def live_text(client: ThreadwardenClient, thread: str, *, settlements: int) -> str:
    """The thread's live text (every delta) until its ``settlements``-th settlement."""
    text: list[str] = []
    async for item in client.stream(thread, wait_for_thread=True):
        if isinstance(item, TextDelta):
            text.append(item.text)
        elif item.kind == "settlement":
            settlements -= 1
            if settlements == 0:
                return "".join(text)
    raise AssertionError(f"{thread}'s stream ended")


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
    live = asyncio.create_task(live_text(client, ids, settlements=30))
    async with agents_worker(bound(framework, server.url, memory)):
        results = await run_turns(client, ids, framework.agent_id, range(30), 400)
    assert [r.outcome for r in results] == ["completed"] * 30
    said = await asyncio.wait_for(live, 30)
    assert "echo: #29 " in said and "summary:" not in said  # a summary answers no one

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


@pytest.mark.parametrize(
    ("memory", "context_limit"),
    [(Memory(), None), (Memory(budget_tokens=2_000), None), (Memory(), 20_000)],
    ids=["verbatim", "budget", "far-past-the-context"],
)
async def test_a_520_turn_thread_still_covers_its_first_turn(
    memory: Memory,
    context_limit: int | None,
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    async with agents_worker(bound(PYDANTIC_AI, server.url, memory)):
        await run_turns(client, ids, PYDANTIC_AI.agent_id, range(1), 40)
        await seed_turns(pool, ids, turns=518, first=1, kind=pydantic_ai.TRANSCRIPT)
        server.context_limit = context_limit  # 520 turns hold about 52,000 characters
        (last,) = await run_turns(client, ids, PYDANTIC_AI.agent_id, range(519, 520), 40)
    assert last.outcome == "completed"
    request = conversation_requests(server)[-1]
    assert [n for n in range(520) if not covers(request, n)] == []
    folds = summary_requests(server)
    if memory.budget_tokens is None and context_limit is None:
        assert folds == []  # every turn verbatim
    else:  # folded a part at a time, each summary request sized to fit
        assert len(folds) > 1
        fits = memory.budget_tokens * 4 * 1.1 if memory.budget_tokens else context_limit
        assert max(characters(body) for body in folds) <= (fits or 0)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"budget_tokens": 0}, "budget_tokens"), ({"keep_turns": -1}, "keep_turns")],
)
def test_memory_refuses_a_bad_setting_naming_it(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        Memory(**arguments)
    assert refused.value.field == field


def test_a_budget_is_part_of_the_digest_and_the_default_memory_is_not() -> None:
    url = "http://127.0.0.1:9/v1"
    plain, default, budget = (
        bound(PYDANTIC_AI, url, memory).digest
        for memory in (None, Memory(), Memory(budget_tokens=1_000))
    )
    assert plain == default != budget


def test_a_turn_is_rendered_only_when_its_text_is_weighed() -> None:
    """No budget: a turn's memory never renders the turns it carries (rendering every kept
    turn each turn is work that grows with the thread); with one, each turn once."""
    rendered: list[int] = []

    def render(body: Any) -> str:
        rendered.append(body["n"])
        return f"turn {body['n']}"

    def record(sequence: int, kind: str, body: dict[str, Any]) -> ThreadRecord:
        return appended("t", sequence, f"s{sequence // 2}", kind, body, None)

    history = []
    for n in range(5):
        history.append(record(2 * n, "transcript", {"n": n}))
        history.append(record(2 * n + 1, "settlement", {"outcome": "completed"}))

    async def ask(_: str, __: str) -> str:
        raise AssertionError("no summary is asked for")

    for budget, expected in ((None, []), (10_000, [0, 1, 2, 3, 4])):
        rendered.clear()
        held = recall(history, "transcript", render)
        compactor = Compactor(None, Memory(budget_tokens=budget), "transcript", ask)  # type: ignore[arg-type]
        assert not compactor.over_budget(held, "next")
        compactor.over_budget(held, "again")  # each turn's text is rendered once, then kept
        assert rendered == expected
