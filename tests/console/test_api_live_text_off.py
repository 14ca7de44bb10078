"""``live_text = false`` on the worker: a streamed step writes no live text (no ``event:
delta``, no row), and its response is journaled once as with live text on."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.console.test_api_live_text import sse, until_settled
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings

ANSWER = " ".join(f"word{n}" for n in range(12))


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"live_text": False})


async def test_no_live_text_when_turned_off(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        await client.submit(ids, agent_id="scripted", input=[{"stream": ANSWER, "chunk_ms": 20}])
        seen = await asyncio.wait_for(until_settled(sse(stream.aiter_lines())), timeout=60)
    assert [e["event"] for e in seen if e["event"] != "record"] == []
    records = await client.records(ids)
    assert [r["kind"] for r in records] == ["tool-call", "tool-result", "message", "settlement"]
    assert records[1]["body"]["result"] == ANSWER
