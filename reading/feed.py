"""A reader with a connection of its own: a thread's committed records in order, then each new
one as it commits, and, for a reader that asks, the live text of the steps that stream.

Shared by the client (`ThreadwardenClient.records`, `ThreadwardenClient.stream`,
`ThreadwardenClient.result`: `threadwarden.client.feed`) and ``threadwarden watch THREAD``
(`threadwarden.cli.watch`). Waiting rests on the NOTIFY every record's statement sends on
`COMMITTED_CHANNEL` when it commits; a notification is only a hint to read the ledger again:

- the listener is registered before the first read, so nothing committed in between is missed;
- a notification can still be lost (the connection dropped): the waiter reads again at least
  every ``recheck_s`` seconds (`RECHECK_S`), and at once when its connection terminates, after
  which it takes a fresh connection from the pool and resumes after the last sequence it saw.

Each feed or waiter holds one pooled connection while it waits (LISTEN and reads on the same
connection, so it never waits for a second one); it ``UNLISTEN``s before giving it back.
Live text rides the same connection (`DeltaNotes`), placed among the records by `TextPlacer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

import asyncpg

from threadwarden.errors import ResultTimeout
from threadwarden.ledger.status import StatusReader, records_after, settlement_of
from threadwarden.reading.listening import CONNECTION_LOST, DeltaNotes, Hint
from threadwarden.reading.placing import Item, TextPlacer

logger = logging.getLogger(__name__)

RECHECK_S = 5.0
"""The longest a waiter goes without reading the ledger, should a notification be lost."""


async def follow_thread(
    pool: asyncpg.Pool[Any],
    thread_id: str,
    *,
    live: bool = True,
    recheck_s: float | None = None,
    wait_for_thread: bool = False,
    text: bool = False,
) -> AsyncGenerator[Item, None]:
    """Yield the thread's committed records in sequence order; with ``live``, never stop,
    yielding each new record once it is committed; with ``live`` and ``text``, also the live
    text of the steps that stream (`TextDelta`: first each one's text so far, then each new
    fragment, after the record that opens the step and before the record that closes it).

    An unknown thread raises `NotFound`, unless ``live`` and ``wait_for_thread``: then the feed
    waits for the thread's first record the way it waits for any new one. ``recheck_s``
    defaults to `RECHECK_S`.
    """
    recheck_s = RECHECK_S if recheck_s is None else recheck_s
    if not (live and wait_for_thread):
        await StatusReader(pool).thread(thread_id)
    placer = TextPlacer(thread_id) if live and text else None
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
                    if placer is None
                    else await stack.enter_async_context(DeltaNotes(conn, thread_id, hint.poke))
                )
                held = True
                catch_up = True  # on each connection: the text so far, then its notifications
                while True:
                    hint.clear()
                    if placer is None or notes is None:
                        items: list[Item] = list(await records_after(conn, thread_id, last))
                    else:
                        items, _ = await placer.round(conn, notes, last, catch_up=catch_up)
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
