"""The console's `LedgerFeed` with live text: a fragment wakes a stream's reader without a read
of the records (a reader costs one statement per record notification, not per fragment), and a
``result?wait=`` subscriber is not woken by live text at all."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import Ledger
from threadwarden.ledger.deltas import Deltas
from threadwarden.ledger.status import records_after
from threadwarden.reading.shared import LedgerFeed
from threadwarden.reading.text import TextDelta


async def test_a_fragment_wakes_a_reader_without_reading_the_records(
    pool: asyncpg.Pool[Any], ids: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = await Ledger.defaults(pool).admit(ids)
    reads = 0

    async def counted(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        nonlocal reads
        reads += 1
        return await records_after(*args, **kwargs)

    monkeypatch.setattr("threadwarden.reading.placing.records_after", counted)
    feed = LedgerFeed(pool)
    deltas = Deltas(pool)
    follow = feed.follow(ids, 0, live=True)
    pending = asyncio.ensure_future(anext(follow))  # subscribes: the feed starts listening
    try:
        await asyncio.wait_for(feed.listening.wait(), 10)
        with feed.subscribe(ids) as result_waiter:  # as a result?wait= subscribes
            result_waiter.clear()
            reads_before = reads
            words = [f"w{n} " for n in range(10)]
            shown = ""
            for n, word in enumerate(words):
                await deltas.write(ids, sub, 1, 1, word)
                while len(shown) < len("".join(words[: n + 1])):
                    item = await asyncio.wait_for(pending, 10)
                    pending = asyncio.ensure_future(anext(follow))
                    assert isinstance(item, TextDelta) and item.text is not None
                    shown += item.text
            assert shown == "".join(words)
            # The listen's first wake may cost one read; a fragment costs none.
            assert reads - reads_before <= 2
            assert not result_waiter.is_set()
    finally:
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await pending
        await follow.aclose()
        await feed.close()


async def test_live_text_goes_out_while_a_read_of_the_records_waits_out_its_fold(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    """A record notified soon after the reader's last read waits for the fold (one read for the
    records a pass commits back to back); a fragment notified meanwhile does not: the reader
    gets it before that record (the fold here is longer than the test's every deadline)."""
    ledger = Ledger.defaults(pool)
    sub = await ledger.admit(ids)
    await ledger.begin(ids)
    claim = await ledger.claim(ids)
    feed = LedgerFeed(pool, coalesce_s=600)
    follow = feed.follow(ids, 0, live=True)
    try:
        await ledger.attempts.append(claim, "message", {"text": "one"}, step=1)
        item = await asyncio.wait_for(anext(follow), 10)  # after a quiet spell: read at once
        assert isinstance(item, dict) and item["body"] == {"text": "one"}
        pending = asyncio.ensure_future(anext(follow))
        await ledger.attempts.append(claim, "message", {"text": "two"}, step=2)  # folded
        await Deltas(pool).write(ids, sub, 3, claim.epoch, "hello")
        item = await asyncio.wait_for(pending, 10)
        assert isinstance(item, TextDelta) and item.text == "hello"
    finally:
        await follow.aclose()
        await feed.close()
