"""The live record feed: a thread's committed records in order, then new ones as they publish.

Shared by ``threadwarden watch THREAD`` and the client (`ThreadwardenClient.records`,
`ThreadwardenClient.result`). Waiting rests on the built-in sink's NOTIFY on
`NOTIFY_CHANNEL`; a notification is only a hint to read the ledger again:

- the listener is registered before the first read, so nothing committed in between is missed;
- a notification can still be late (the publication outbox drains in a later pass, or its
  drain failed and backs off) or lost (the connection dropped): the waiter reads again at least
  every ``recheck_s`` seconds (`RECHECK_S`), and at once when its connection terminates, after
  which it takes a fresh connection from the pool and resumes after the last sequence it saw.

Each feed or waiter holds one pooled connection while it waits (LISTEN and reads on the same
connection, so it never waits for a second one); it ``UNLISTEN``s before giving it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import NotFound, ResultTimeout
from threadwarden.ledger.pool import Connection, create_pool
from threadwarden.ledger.publication import NOTIFY_CHANNEL
from threadwarden.ledger.status import StatusReader, records_after, settlement_of
from threadwarden.worker.cli_output import print_json
from threadwarden.worker.record_text import summary

logger = logging.getLogger(__name__)

RECHECK_S = 5.0
"""The longest a waiter goes without reading the ledger, should a notification be late or lost."""

_CONNECTION_LOST = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
    ConnectionError,
)


class _Hint:
    """Set by a notification that matches, or by the connection's termination."""

    def __init__(self, conn: Connection, matches: Callable[[dict[str, Any]], bool]) -> None:
        self._conn = conn
        self._matches = matches
        self._event = asyncio.Event()

    def _on_notify(self, *args: Any) -> None:
        with contextlib.suppress(ValueError, AttributeError):
            if self._matches(json.loads(args[-1])):
                self._event.set()

    def _on_terminate(self, *_: Any) -> None:
        self._event.set()

    async def __aenter__(self) -> _Hint:
        self._conn.add_termination_listener(self._on_terminate)
        await self._conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._conn.remove_termination_listener(self._on_terminate)
        if not self._conn.is_closed():
            with contextlib.suppress(*_CONNECTION_LOST, asyncpg.InterfaceError):
                await self._conn.remove_listener(NOTIFY_CHANNEL, self._on_notify)  # UNLISTEN

    def clear(self) -> None:
        """Forget earlier hints; call it before reading, so one during the read counts."""
        self._event.clear()

    async def wait(self, at_most_s: float) -> None:
        """Until a hint arrives or ``at_most_s`` passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), max(at_most_s, 0))


async def follow_records(
    pool: asyncpg.Pool[Any],
    thread_id: str,
    *,
    live: bool = True,
    recheck_s: float | None = None,
    wait_for_thread: bool = False,
) -> AsyncGenerator[dict[str, Any], None]:
    """Yield the thread's committed records in sequence order; with ``live``, never stop,
    yielding each new record once it is committed.

    An unknown thread raises `NotFound`, unless ``live`` and ``wait_for_thread``: then the feed
    waits for the thread's first record the way it waits for any new one (the first
    submission's records are announced on the same channel). ``recheck_s`` defaults to
    `RECHECK_S`.
    """
    recheck_s = RECHECK_S if recheck_s is None else recheck_s
    if not (live and wait_for_thread):
        await StatusReader(pool).thread(thread_id)
    last = 0
    while True:
        held = False
        try:
            async with (
                pool.acquire() as conn,
                _Hint(conn, lambda note: note.get("thread_id") == thread_id) as hint,
            ):
                held = True
                while True:
                    hint.clear()
                    for record in await records_after(conn, thread_id, last):
                        last = record["sequence"]
                        yield record
                    if not live:
                        return
                    await hint.wait(recheck_s)
        except _CONNECTION_LOST as error:
            if not held:  # no connection to be had: the database is away, tell the caller
                raise
            logger.warning("record feed of %s lost its connection, resuming: %s", thread_id, error)


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
                _Hint(
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
        except _CONNECTION_LOST as error:
            if not held:
                raise
            logger.warning("wait for %s lost its connection, resuming: %s", submission_id, error)
    return thread_id, body


class ThreadRecord(BaseModel):
    """One canonical record of a thread, as `RecordFeed` yields it."""

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


class RecordFeed:
    """A thread's records: ``async for`` yields `ThreadRecord` models, the committed ones in
    order and then each new one live, never ending on its own; ``await`` returns the committed
    records now, as plain mappings (the form existing callers read).

    Breaking out of the loop (or ``aclose`` through ``contextlib.aclosing``) gives its
    connection back. Iterating raises `NotFound` for an unknown thread (with
    ``wait_for_thread``, waits for it instead); awaiting returns ``[]``.
    """

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

    def __await__(self) -> Generator[Any, None, list[dict[str, Any]]]:
        return StatusReader(self._pool).records(self._thread_id).__await__()

    async def __aiter__(self) -> AsyncIterator[ThreadRecord]:
        feed = follow_records(
            self._pool,
            self._thread_id,
            recheck_s=self._recheck_s,
            wait_for_thread=self._wait_for_thread,
        )
        async with contextlib.aclosing(feed):
            async for record in feed:
                yield ThreadRecord.model_validate(record)


def _show(record: dict[str, Any], as_json: bool, verbose: bool) -> None:
    if as_json:
        print_json(record)
    else:
        what = (
            json.dumps(record["body"], default=str)
            if verbose
            else summary(record["kind"], record["body"])
        )
        print(f"{record['sequence']:>6}  {record['kind']:<18} {record['submission_id']}  {what}")
    print(end="", flush=True)


async def watch(
    database_url: str, thread_id: str, *, as_json: bool, follow: bool, verbose: bool = False
) -> int:
    """Print the thread's records in order, each in a few words (a model's reply as its text;
    ``verbose``: the whole body); with ``follow``, keep printing new ones, waiting for a thread
    that does not exist yet (``tail -F``; a note on stderr says so, except under ``--json``).
    Without ``follow`` an unknown thread raises `NotFound`."""
    pool = await create_pool(database_url, max_size=2)
    try:
        if follow and not as_json:
            try:
                await StatusReader(pool).thread(thread_id)
            except NotFound:
                print(
                    f"threadwarden: thread {thread_id} does not exist yet; waiting for it",
                    file=sys.stderr,
                    flush=True,
                )
        feed = follow_records(pool, thread_id, live=follow, wait_for_thread=follow)
        async with contextlib.aclosing(feed):
            async for record in feed:
                _show(record, as_json, verbose)
        return 0
    finally:
        await pool.close()
