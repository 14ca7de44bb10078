"""A step whose attempt is cut off starts its live text over (issue 31): here a deploy stops the
worker streaming a 4 s answer inline, and the next worker's attempt streams it afresh. The
reader is told (``restart``): the text after the last restart is the journaled one."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from tests.console.test_api_live_text import ANSWER, STREAM, sse, until_settled
from tests.helpers.feed import ANSWER_INLINE_BUDGET_MS, stopped_mid_answer
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient


async def test_a_step_cut_off_starts_over_with_restart(
    workers: Workers,
    client: ThreadwardenClient,
    http: httpx.AsyncClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    deployed = workers.tuned(inline_budget_ms=ANSWER_INLINE_BUDGET_MS)
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        events = asyncio.create_task(until_settled(sse(stream.aiter_lines())))
        async with deployed.running() as first:
            await client.submit(ids, agent_id="scripted", input=STREAM)
            await stopped_mid_answer(first, pool, ids)
        async with deployed.running():
            seen = await asyncio.wait_for(events, timeout=60)
    deltas = [e for e in seen if e["event"] == "delta"]
    restarts = [n for n, d in enumerate(deltas) if d["restart"]]
    assert restarts, "the deploy cut the first attempt: its re-run starts over"
    assert "".join(d["text"] for d in deltas[: restarts[0]]).split()[:5] == ANSWER.split()[:5]
    after = deltas[restarts[-1] :]
    assert "".join(d["text"] for d in after) == ANSWER  # the re-run's text, whole, once
    records = await client.records(ids)
    results = [r["body"]["result"] for r in records if r["kind"] == "tool-result"]
    assert results == [ANSWER]  # one journaled response
