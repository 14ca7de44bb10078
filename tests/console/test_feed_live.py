"""The console's `LedgerFeed` with live text: a fragment wakes a stream's reader without a read
of the records (a reader costs one statement per record notification, not per fragment), and a
``result?wait=`` subscriber is not woken by live text at all."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import Ledger
from threadwarden.console.feed import LedgerFeed
from threadwarden.ledger.deltas import Delta, Deltas
from threadwarden.ledger.status import records_after


async def test_a_fragment_wakes_a_reader_without_reading_the_records(
    pool: asyncpg.Pool[Any], ids: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = await Ledger.defaults(pool).admit(ids)
    reads = 0

    async def counted(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        nonlocal reads
        reads += 1
        return await records_after(*args, **kwargs)

    monkeypatch.setattr("threadwarden.console.feed.records_after", counted)
    feed = LedgerFeed(pool)
    deltas = Deltas(pool)
    follow = feed.follow(ids, 0, live=True)
    try:
        with feed.subscribe(ids) as result_waiter:  # as a result?wait= subscribes
            words = [f"w{n} " for n in range(10)]
            shown = ""
            for n, word in enumerate(words):
                await deltas.write(ids, sub, 1, 1, word)
                while len(shown) < len("".join(words[: n + 1])):
                    item = await asyncio.wait_for(anext(follow), 10)
                    assert isinstance(item, Delta) and item.text is not None
                    shown += item.text
                if n == 0:  # the feed has read the records and listens: count from here
                    reads_before = reads
                    result_waiter.clear()
            assert shown == "".join(words)
            assert reads - reads_before <= 1  # at most a recheck, not one read per fragment
            assert not result_waiter.is_set()
    finally:
        await follow.aclose()
        await feed.close()
