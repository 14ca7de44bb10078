"""Live text of each framework's real OpenAI client over HTTP (issue 31): the scripted chat
server streams a 40-word answer a word every 100 ms; readers of the API's event stream
(``GET /v1/threads/{id}/events``) get it as ``event: delta`` before the journaled response, a
reader that reconnects mid-answer gets the whole text once, and the journal holds the response
once and no delta. A worker SIGKILLed mid-stream: the re-run streams afresh (``restart``), one
response is journaled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.agents.chat_graph import GRAPH_AGENT, langgraph_bindings
from tests.agents.conftest import AgentsWorker, WorkerProcess, each_framework
from tests.helpers.chat_server import ChatServer, words
from tests.helpers.model_agents import (
    OPENAI_AGENTS,
    PYDANTIC_AGENT,
    PYDANTIC_AI,
    Framework,
    all_bindings,
)
from threadwarden.agents._core.steps import MODEL_TOOL
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.console.server import serving

ANSWER = words(40)
SAY = "say 40"
"""The user turn the scripted server answers with ANSWER: 40 words, one every 100 ms."""


@pytest.fixture
async def http(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], settings: Settings
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on a console (no token, loopback) serving the test's ledger."""
    served = settings.model_copy(update={"console_address": "127.0.0.1:0"})
    async with (
        serving(client, pool, served) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as session,
    ):
        yield session


@dataclass
class Event:
    """One event of the API's stream, when the reader got it."""

    kind: str
    data: dict[str, Any]
    id: str | None
    at: float

    @property
    def settles(self) -> bool:
        return self.kind == "record" and self.data["kind"] == "settlement"


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """The events of an open event stream (comments and retry lines skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in fields:
                data = json.loads(fields["data"])
                yield Event(fields["event"], data, fields.get("id"), time.monotonic())
            fields = {}
        elif not line.startswith((":", "retry:")):
            name, _, value = line.partition(": ")
            fields[name] = value


async def until_settled(stream: AsyncIterator[Event]) -> list[Event]:
    """The events up to the first settlement."""
    seen = []
    async for event in stream:
        seen.append(event)
        if event.settles:
            return seen
    raise AssertionError(f"the stream ended after {[(e.kind, e.data) for e in seen]}")


def texts(seen: list[Event]) -> list[str]:
    return [e.data["text"] for e in seen if e.kind == "delta"]


def model_results(records: list[dict[str, Any]]) -> list[Any]:
    """The journaled model responses (the model-request steps' results)."""
    return [
        r["body"]["result"]
        for r in records
        if r["kind"] == "tool-result" and r["body"].get("tool") == MODEL_TOOL
    ]


@each_framework(PYDANTIC_AI, OPENAI_AGENTS, Framework("langgraph", GRAPH_AGENT, langgraph_bindings))
async def test_agents_stream_live_text_to_readers_and_journal_the_response_once(
    framework: Framework,
    agents_worker: AgentsWorker,
    client: ThreadwardenClient,
    server: ChatServer,
    http: httpx.AsyncClient,
    ids: str,
) -> None:
    url = f"/v1/threads/{ids}/events"
    opened = [asyncio.Event(), asyncio.Event()]

    async def from_the_start() -> list[Event]:
        async with http.stream("GET", url) as response:
            opened[0].set()
            return await until_settled(events(response))

    async def reconnecting() -> tuple[list[str], list[Event]]:
        """A few deltas, then away; back with Last-Event-ID (the last record it saw)."""
        early: list[str] = []
        last: str | None = None
        async with http.stream("GET", url) as response:
            opened[1].set()
            async for event in events(response):
                if event.kind == "record":
                    last = event.id
                elif len(early) < 3:
                    early.append(event.data["text"])
                if len(early) == 3:
                    break
        headers = {} if last is None else {"last-event-id": last}
        async with http.stream("GET", url, headers=headers) as response:
            return early, await until_settled(events(response))

    server.stream_delay_s = 0.1
    async with agents_worker(*framework.bindings(server.url)):
        readers = asyncio.gather(from_the_start(), reconnecting())
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in opened)), timeout=30)
        receipt = await client.submit(ids, agent_id=framework.agent_id, input=SAY)
        whole, (early, again) = await asyncio.wait_for(readers, timeout=60)
        result = await client.result(receipt.submission_id, timeout=30)
    assert result.outcome == "completed"
    assert ANSWER in json.dumps(result.result)

    deltas = [e for e in whole if e.kind == "delta"]
    assert len(deltas) >= 10, [(e.kind, e.data) for e in whole]
    assert "".join(texts(whole)) == ANSWER  # the whole text, once
    assert not any(d.data["restart"] for d in deltas)
    assert {d.data["submission_id"] for d in deltas} == {receipt.submission_id}
    assert all(d.id is None for d in deltas)  # Last-Event-ID stays a record's sequence
    order = [
        "delta" if e.kind == "delta" else f"{e.data['kind']}:{e.data['body'].get('tool')}"
        for e in whole
    ]
    assert order.index("delta") < order.index(f"tool-result:{MODEL_TOOL}")
    assert whole[-1].at - deltas[0].at >= 2.0  # the first words came seconds before the end

    assert len(early) == 3
    resumed = texts(again)
    assert "".join(resumed) == ANSWER  # the text so far as one delta, then the rest: once
    assert resumed[0].startswith("".join(early))

    records = await client.records(ids)
    assert not any("delta" in r["kind"] for r in records)
    (response,) = model_results(records)  # one step, journaled once
    assert ANSWER in json.dumps(response)
    assert len(server.requests) == 1  # asked once, streamed
    assert server.requests[0]["stream"] is True
    assert server.streams_finished == 1


async def test_agents_worker_killed_mid_stream_restarts_the_text_and_journals_one_response(
    client: ThreadwardenClient,
    server: ChatServer,
    agents_worker: AgentsWorker,
    http: httpx.AsyncClient,
    tools: Path,
    worker_processes: WorkerProcess,
    ids: str,
) -> None:
    server.stream_delay_s = 0.1
    spec = "tests.helpers.model_agents:bindings"
    async with http.stream("GET", f"/v1/threads/{ids}/events") as response:
        stream = events(response)
        seen: list[Event] = []
        async with worker_processes("w1", spec) as first:
            receipt = await client.submit(ids, agent_id=PYDANTIC_AGENT, input=SAY)

            async def some_words() -> None:
                async for event in stream:
                    seen.append(event)
                    if len(texts(seen)) >= 5:
                        return

            await asyncio.wait_for(some_words(), timeout=60)
            async with agents_worker(*all_bindings(server.url)):  # ready to take over
                first.kill()  # SIGKILL mid-stream: the response was never journaled
                await first.wait()
                seen += await asyncio.wait_for(until_settled(stream), timeout=90)
                result = await client.result(receipt.submission_id, timeout=30)
    assert (result.outcome, result.result) == ("completed", ANSWER)

    deltas = [e.data for e in seen if e.kind == "delta"]
    restarts = [n for n, d in enumerate(deltas) if d["restart"]]
    assert restarts, "the re-run started the step over"
    cut_off = "".join(d["text"] for d in deltas[: restarts[0]])
    assert len(cut_off.split()) >= 5 and ANSWER.startswith(cut_off)
    assert "".join(d["text"] for d in deltas[restarts[-1] :]) == ANSWER  # the re-run's text

    records = await client.records(ids)
    assert not any("delta" in r["kind"] for r in records)
    (response,) = model_results(records)  # one journaled response
    assert ANSWER in json.dumps(response)
    calls = [r for r in records if r["kind"] == "tool-call" and r["body"]["tool"] == MODEL_TOOL]
    assert len(calls) == 1  # the step was prepared once; its re-run asked again
    assert len(server.requests) == 2  # the cut-off stream, then the re-run's
    assert server.streams_finished == 1
