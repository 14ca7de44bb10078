"""A step whose attempt is cut off starts its live text over (issue 31): here the scripted
binding's inline budget (2 s) cuts a 4 s answer, and its re-run on the agent's queue streams
afresh. The reader is told (``restart``): the text after the last restart is the journaled one."""

from __future__ import annotations

import asyncio

import httpx

from tests.console.test_api_live_text import ANSWER, STREAM, sse, until_settled
from threadwarden.client.client import ThreadwardenClient


async def test_a_step_cut_off_starts_over_with_restart(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        await client.submit(ids, agent_id="scripted", input=STREAM)
        seen = await asyncio.wait_for(until_settled(sse(stream.aiter_lines())), timeout=60)
    deltas = [e for e in seen if e["event"] == "delta"]
    restarts = [n for n, d in enumerate(deltas) if d["restart"]]
    assert restarts, "the inline budget cut the first attempt: its re-run starts over"
    after = deltas[restarts[-1] :]
    assert "".join(d["text"] for d in after) == ANSWER  # the re-run's text, whole, once
    records = await client.records(ids)
    results = [r["body"]["result"] for r in records if r["kind"] == "tool-result"]
    assert results == [ANSWER]  # one journaled response
