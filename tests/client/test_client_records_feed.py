"""`ThreadwardenClient.records(wait_for_thread=True)` on a thread that does not exist yet waits
for it, as ``tail -F`` does (issue 12): a client can subscribe before it posts its first
message. ``watch``'s twin is tests/cli/test_cli_watch.py."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from tests.helpers.feed import DEADLINE_S, listening
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient


async def test_client_records_wait_for_thread_follows_a_thread_created_after_subscribing(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    async def first_settlement() -> list[str]:
        kinds: list[str] = []
        async for record in client.records(ids, wait_for_thread=True):
            kinds.append(record.kind)
            if record.kind == "settlement":
                return kinds
        raise AssertionError("the feed ended")

    following = asyncio.create_task(first_settlement())
    # Subscribed and reading the (empty) thread before the thread exists, not failed.
    await eventually(lambda: listening(pool), lambda n: n == 1, what="the feed waiting")
    assert not following.done()
    await client.submit(ids, agent_id="scripted", input=[{"say": "hello"}])
    kinds = await asyncio.wait_for(following, DEADLINE_S)
    assert kinds[-1] == "settlement" and "message" in kinds
