"""The API's event stream shows a record as it commits, not when the turn's pass publishes it
(issue 38): a turn's record written before a slow step reaches the reader long before its
settlement."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.console.api import events
from tests.helpers.feed import without_inline_heads
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings

SLOW_S = 6.0
"""The slow step of the turn."""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """On the agent's queue: inline, the slow step would pass the inline budget and start over."""
    return without_inline_heads(settings)


async def test_a_record_reaches_the_stream_as_it_commits_not_at_the_end_of_the_turn(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    loop = asyncio.get_running_loop()
    turn = [{"say": "before the slow step"}, {"sleep_ms": int(SLOW_S * 1000)}]
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        lines = stream.aiter_lines()
        await client.submit(ids, agent_id="scripted", input=turn)
        [said] = await asyncio.wait_for(events(lines, 1), timeout=30)
        said_at = loop.time()
        rest = await asyncio.wait_for(
            events(lines, until=lambda e: json.loads(e["data"])["kind"] == "settlement"), 30
        )
        settled_at = loop.time()
    assert json.loads(said["data"])["kind"] == "message"
    assert json.loads(rest[-1]["data"])["kind"] == "settlement"
    assert settled_at - said_at >= 3.0  # it came as it committed, the 6 s step still ahead
