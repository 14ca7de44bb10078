"""Live text through the HTTP API (issue 31): ``event: delta`` beside the records, the whole
text once whether the reader was there from the start or arrived mid-answer (after the record
that opens its step, before the one that closes it), never journaled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from tests.console.api import post
from tests.helpers.feed import text_so_far
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings

ANSWER = " ".join(f"word{n}" for n in range(40))
STREAM = [{"stream": ANSWER, "chunk_ms": 100}]
"""40 words, one every 100 ms: about 4 s of live text."""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No inline heads: every attempt is dispatched (a restart needs a deploy mid-answer, as
    `test_a_step_cut_off_starts_over_with_restart` shows)."""
    return settings.model_copy(update={"inline_budget_ms": 0})


async def sse(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    """The events of a stream, each as its fields (comments skipped)."""
    event: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if "event" in event:
                yield event
            event = {}
        elif not line.startswith(":") and not line.startswith("retry:"):
            name, _, value = line.partition(": ")
            event[name] = value


async def until_settled(events: AsyncIterator[dict[str, str]]) -> list[dict[str, Any]]:
    """Each event's kind and data until the stream shows a settlement."""
    seen: list[dict[str, Any]] = []
    async for event in events:
        data = json.loads(event["data"])
        seen.append({"event": event["event"], "id": event.get("id"), **data})
        if event["event"] == "record" and data["kind"] == "settlement":
            return seen
    raise AssertionError(f"the stream ended after {seen}")


async def test_a_streamed_answer_arrives_as_deltas_before_its_settlement(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        admitted = await post(http, f"/v1/threads/{ids}/submissions", {
            "agent": "scripted", "input": STREAM,
        })  # fmt: skip
        seen = await asyncio.wait_for(until_settled(sse(stream.aiter_lines())), timeout=60)
    deltas = [e for e in seen if e["event"] == "delta"]
    assert len(deltas) >= 10, seen
    assert not any(d["restart"] for d in deltas)
    assert all(d["id"] is None for d in deltas)  # Last-Event-ID stays a record's sequence
    assert "".join(d["text"] for d in deltas) == ANSWER  # the whole text, once
    kinds = [e["kind"] if e["event"] == "record" else "delta" for e in seen]
    assert kinds.index("delta") < kinds.index("tool-result")  # before the journaled response
    submission_id = admitted.json()["submission_id"]
    assert {d["submission_id"] for d in deltas} == {submission_id}
    records = await client.records(ids)
    assert [r["kind"] for r in records] == ["tool-call", "tool-result", "message", "settlement"]
    assert records[1]["body"]["result"] == ANSWER  # journaled whole, once; no delta record


async def test_a_reader_arriving_mid_answer_gets_the_text_so_far_then_the_rest(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as first:
        await client.submit(ids, agent_id="scripted", input=STREAM)
        events = sse(first.aiter_lines())
        early = []
        async for event in events:  # a few words, then the reader goes away
            if event["event"] == "delta":
                early.append(json.loads(event["data"])["text"])
                if len(early) == 3:
                    break
    headers = {"last-event-id": "1"}  # it had seen the tool-call record
    async with http.stream("GET", f"/v1/threads/{ids}/events", headers=headers) as again:
        seen = await asyncio.wait_for(until_settled(sse(again.aiter_lines())), timeout=60)
    deltas = [e["text"] for e in seen if e["event"] == "delta"]
    assert "".join(deltas) == ANSWER  # the text so far as one delta, then the rest: once
    assert deltas[0].startswith("".join(early)) and len(deltas[0]) >= len("".join(early))


async def test_a_resumed_reader_gets_a_steps_text_after_the_record_that_opens_it(
    worker: None,
    client: ThreadwardenClient,
    http: httpx.AsyncClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    """Trap 4: resumed after an earlier turn, mid-step, the reader gets the step's opening
    record (its ``tool-call``) first, then its text so far and the rest, then its response."""
    earlier = await client.submit(ids, agent_id="scripted", input=[{"say": "earlier"}])
    await client.result(earlier.submission_id, timeout=60)  # records 1 and 2
    await client.submit(ids, agent_id="scripted", input=STREAM)  # its tool-call: record 3
    await eventually(
        lambda: text_so_far(pool, ids), lambda text: len(text.split()) >= 5, what="5 words"
    )
    headers = {"last-event-id": "2"}
    async with http.stream("GET", f"/v1/threads/{ids}/events", headers=headers) as resumed:
        seen = await asyncio.wait_for(until_settled(sse(resumed.aiter_lines())), timeout=60)
    kinds = [e["kind"] if e["event"] == "record" else "delta" for e in seen]
    texts = [e["text"] for e in seen if e["event"] == "delta"]
    # the text so far after the record that opens its step, all of it before its response
    assert kinds == ["tool-call", *["delta"] * len(texts), "tool-result", "message", "settlement"]
    assert "".join(texts) == ANSWER
