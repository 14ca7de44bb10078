"""`ThreadwardenClient.records(wait_for_thread=True)` on a thread that does not exist yet waits
for it, as ``tail -F`` does (issue 12): a client can subscribe before it posts its first
message. ``watch``'s twin is tests/cli/test_cli_watch.py. A record reaches the feed as it
commits, not when a sink publishes it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from tests.helpers.feed import DEADLINE_S, listening
from tests.helpers.ledger import Ledger
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import RecordFeed
from threadwarden.ledger.records import insert_record


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


async def test_a_record_reaches_the_feed_as_it_commits_before_any_publication(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    """No worker, so no pass drains the outbox: the record's own commit wakes the feed (its
    re-read never comes)."""
    submission_id = await Ledger.defaults(pool).admit(ids)
    feed = aiter(RecordFeed(pool, ids, recheck_s=3_600.0))
    first = asyncio.ensure_future(anext(feed))
    try:
        await eventually(lambda: listening(pool), lambda n: n == 1, what="the feed waiting")
        async with pool.acquire() as conn:
            await insert_record(
                conn, thread_id=ids, submission_id=submission_id, kind="message", body={}, epoch=1
            )
        record = await asyncio.wait_for(first, 10)
    finally:
        first.cancel()
        await feed.aclose()  # type: ignore[attr-defined]
    assert (record.sequence, record.kind) == (1, "message")
    unpublished = await pool.fetchval(
        "SELECT count(*) FROM threadwarden.publications WHERE thread_id = $1", ids
    )
    assert unpublished == 1  # still in the outbox: no sink has published it
