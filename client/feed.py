"""The live record feed: a thread's committed records in order, then new ones as they publish,
and, for a reader that asks, the live text of the steps that stream (issue 31).

Shared by the client (`ThreadwardenClient.records`, `ThreadwardenClient.stream`,
`ThreadwardenClient.result`) and ``threadwarden watch THREAD`` (which prints it:
`threadwarden.cli.watch`). Waiting rests on the built-in sink's
NOTIFY on `NOTIFY_CHANNEL`; a notification is only a hint to read the ledger again:

- the listener is registered before the first read, so nothing committed in between is missed;
- a notification can still be late (the publication outbox drains in a later pass, or its
  drain failed and backs off) or lost (the connection dropped): the waiter reads again at least
  every ``recheck_s`` seconds (`RECHECK_S`), and at once when its connection terminates, after
  which it takes a fresh connection from the pool and resumes after the last sequence it saw.

Each feed or waiter holds one pooled connection while it waits (LISTEN and reads on the same
connection, so it never waits for a second one); it ``UNLISTEN``s before giving it back.

Live text (`follow_thread` with ``text``) rides the same connection: it also LISTENs on
`DELTA_CHANNEL`, reads each streaming step's text so far when it (re)connects, and shows what a
`DeltaTracker` says is new (`threadwarden.client.live_text`: how it keeps the order of text and
records). The hint itself is `threadwarden.client.listening`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.client.listening import CONNECTION_LOST, Hint
from threadwarden.client.live_text import DeltaNotes, LiveText, TextDelta
from threadwarden.errors import ResultTimeout
from threadwarden.ledger.status import StatusReader, records_after, settlement_of

logger = logging.getLogger(__name__)

RECHECK_S = 5.0
"""The longest a waiter goes without reading the ledger, should a notification be late or lost."""


async def follow_thread(
    pool: asyncpg.Pool[Any],
    thread_id: str,
    *,
    live: bool = True,
    recheck_s: float | None = None,
    wait_for_thread: bool = False,
    text: bool = False,
) -> AsyncGenerator[dict[str, Any] | TextDelta, None]:
    """Yield the thread's committed records in sequence order; with ``live``, never stop,
    yielding each new record once it is committed; with ``live`` and ``text``, also the live
    text of the steps that stream (`TextDelta`: first each one's text so far, then each new
    fragment, before the record that closes the step).

    An unknown thread raises `NotFound`, unless ``live`` and ``wait_for_thread``: then the feed
    waits for the thread's first record the way it waits for any new one (the first
    submission's records are announced on the same channel). ``recheck_s`` defaults to
    `RECHECK_S`.
    """
    recheck_s = RECHECK_S if recheck_s is None else recheck_s
    if not (live and wait_for_thread):
        await StatusReader(pool).thread(thread_id)
    shown = LiveText(thread_id) if live and text else None
    last = 0
    while True:
        held = False
        try:
            async with (
                pool.acquire() as conn,
                Hint(conn, lambda note: note.get("thread_id") == thread_id) as hint,
                contextlib.AsyncExitStack() as stack,
            ):
                notes = (
                    None
                    if shown is None
                    else await stack.enter_async_context(DeltaNotes(conn, thread_id, hint.poke))
                )
                held = True
                catch_up = True  # on each connection: the text so far, then its notifications
                while True:
                    hint.clear()
                    if shown is None or notes is None:
                        items: list[dict[str, Any] | TextDelta] = list(
                            await records_after(conn, thread_id, last)
                        )
                    else:
                        items = await shown.round(conn, notes, last, catch_up=catch_up)
                        catch_up = False
                    for item in items:
                        if isinstance(item, dict):
                            last = item["sequence"]
                        yield item
                    if not live:
                        return
                    await hint.wait(recheck_s)
        except CONNECTION_LOST as error:
            if not held:  # no connection to be had: the database is away, tell the caller
                raise
            logger.warning("feed of %s lost its connection, resuming: %s", thread_id, error)


async def await_settlement(
    pool: asyncpg.Pool[Any],
    submission_id: str,
    *,
    timeout_s: float | None,
    recheck_s: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """The submission's thread and settlement body, once it settled.

    Raises `NotFound` for an unknown submission and `ResultTimeout` when ``timeout_s`` passes
    first. ``recheck_s`` defaults to `RECHECK_S`.
    """
    recheck_s = RECHECK_S if recheck_s is None else recheck_s
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    async with pool.acquire() as conn:  # which thread to listen for (NotFound if none)
        thread_id, body = await settlement_of(conn, submission_id)
    while body is None:
        held = False
        try:
            async with (
                pool.acquire() as conn,
                Hint(
                    conn,
                    lambda note: (
                        (note.get("thread_id"), note.get("kind")) == (thread_id, "settlement")
                    ),
                ) as hint,
            ):
                held = True
                while True:
                    hint.clear()
                    _, body = await settlement_of(conn, submission_id)
                    if body is not None:
                        break
                    left = recheck_s if deadline is None else deadline - loop.time()
                    if left <= 0:
                        raise ResultTimeout(
                            f"submission {submission_id!r}: not settled within {timeout_s} s"
                        )
                    await hint.wait(min(left, recheck_s))
        except CONNECTION_LOST as error:
            if not held:
                raise
            logger.warning("wait for %s lost its connection, resuming: %s", submission_id, error)
    return thread_id, body


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
