"""The client's record feeds: `RecordFeed` and `ThreadStream` (`ThreadwardenClient.records`,
`ThreadwardenClient.stream`) and the `FeedRecord` they yield.

They read with `threadwarden.reading.feed`'s `follow_thread`: a connection per reader, woken as
each record commits, the live text placed among the records as every reader's is.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.ledger.status import StatusReader
from threadwarden.reading.feed import follow_thread
from threadwarden.reading.text import TextDelta


class FeedRecord(BaseModel):
    """One committed record of a thread's journal as an observer reads it: what `RecordFeed`
    and `ThreadStream` yield, and what ``watch --json`` prints (a binding reads its own
    thread's records as `threadwarden.ThreadRecord`, with their step instead of their epoch)."""

    sequence: int
    """Position in the thread, from 1, without gaps."""
    record_id: str
    submission_id: str
    """The submission that produced it."""
    kind: str
    """``message``, ``tool-call``, ``settlement``, ...; see docs/bindings.md."""
    body: Any
    epoch: int
    """The submission's attempt epoch that wrote it."""


class _ThreadFeed:
    """What `RecordFeed` and `ThreadStream` share: the thread they follow, and how."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        thread_id: str,
        *,
        recheck_s: float | None = None,
        wait_for_thread: bool = False,
    ) -> None:
        self._pool = pool
        self._thread_id = thread_id
        self._recheck_s = recheck_s
        self._wait_for_thread = wait_for_thread

    async def _follow(self, *, text: bool) -> AsyncGenerator[FeedRecord | TextDelta, None]:
        feed = follow_thread(
            self._pool,
            self._thread_id,
            recheck_s=self._recheck_s,
            wait_for_thread=self._wait_for_thread,
            text=text,
        )
        async with contextlib.aclosing(feed):
            async for item in feed:
                yield item if isinstance(item, TextDelta) else FeedRecord.model_validate(item)


class RecordFeed(_ThreadFeed):
    """A thread's records: ``async for`` yields `FeedRecord` models, the committed ones in
    order and then each new one live, never ending on its own; ``await`` returns the committed
    records now, as plain mappings (the form existing callers read).

    Breaking out of the loop (or ``aclose`` through ``contextlib.aclosing``) gives its
    connection back. Iterating raises `NotFound` for an unknown thread (with
    ``wait_for_thread``, waits for it instead); awaiting returns ``[]``.
    """

    def __await__(self) -> Generator[Any, None, list[dict[str, Any]]]:
        return StatusReader(self._pool).records(self._thread_id).__await__()

    async def __aiter__(self) -> AsyncIterator[FeedRecord]:
        async with contextlib.aclosing(self._follow(text=False)) as feed:
            async for record in feed:
                assert isinstance(record, FeedRecord)  # no live text was asked for
                yield record


class ThreadStream(_ThreadFeed):
    """A thread's records and live text: ``async for`` yields `FeedRecord` models (as
    `RecordFeed` does: the committed ones in order, then each new one) and, among them,
    `TextDelta` models: for each step that streams, first its text so far, then each new
    fragment, all before the step's journaled response. It never ends on its own.

    Breaking out of the loop (or ``aclose`` through ``contextlib.aclosing``) gives its
    connection back. Iterating raises `NotFound` for an unknown thread (with
    ``wait_for_thread``, waits for it instead).
    """

    def __aiter__(self) -> AsyncGenerator[FeedRecord | TextDelta, None]:
        return self._follow(text=True)
