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
`DeltaTracker` says is new (see `_LiveText` for how it keeps the order of text and records).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import ResultTimeout
from threadwarden.ledger.deltas import (
    DELTA_CHANNEL,
    Delta,
    Deltas,
    DeltaTracker,
    Resync,
    parse_notification,
)
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.publication import NOTIFY_CHANNEL
from threadwarden.ledger.status import StatusReader, records_after, settlement_of

logger = logging.getLogger(__name__)

RECHECK_S = 5.0
"""The longest a waiter goes without reading the ledger, should a notification be late or lost."""
MAX_QUEUED_DELTAS = 256
"""Live-text notifications a feed keeps between its reads; past that it reads the rows instead."""

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

    def poke(self) -> None:
        """Read again at once (live text to show, or to look for)."""
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


class TextDelta(BaseModel):
    """A fragment of the text a model generates for a journal step, live (issue 31): never a
    record. The fragments of a step concatenate to its text, once; its journaled response (the
    step's ``tool-result`` record) is the text the application keeps."""

    submission_id: str
    step: int
    """The journal step whose model request streams."""
    text: str
    """The new fragment (for a reader that arrived mid-step, first the text so far)."""
    restart: bool = False
    """The step started over (a re-run after a cut-off attempt): what was shown of it before is
    not part of its text; this fragment begins it again."""


_Key = tuple[str, int]
"""A streaming step: its submission and journal step."""

_RESULT_STEPS = (
    "SELECT sequence, step FROM threadwarden.records"
    " WHERE thread_id = $1 AND sequence = ANY($2::bigint[])"
)


class _Notes:
    """LISTEN on `DELTA_CHANNEL` on the feed's connection: the thread's fragments notified
    since the feed last took them (each one also pokes the feed's hint)."""

    def __init__(self, conn: Connection, thread_id: str, hint: _Hint) -> None:
        self._conn = conn
        self._thread_id = thread_id
        self._hint = hint
        self._queue: list[Delta] = []
        self.overflow = False

    def _on_delta(self, *args: Any) -> None:
        parsed = parse_notification(str(args[-1]))
        if parsed is None or parsed[0] != self._thread_id:
            return
        if len(self._queue) < MAX_QUEUED_DELTAS:
            self._queue.append(parsed[1])
        else:  # a slow reader: it reads the rows instead
            self.overflow = True
        self._hint.poke()

    async def __aenter__(self) -> _Notes:
        await self._conn.add_listener(DELTA_CHANNEL, self._on_delta)
        return self

    async def __aexit__(self, *_: object) -> None:
        if not self._conn.is_closed():
            with contextlib.suppress(*_CONNECTION_LOST, asyncpg.InterfaceError):
                await self._conn.remove_listener(DELTA_CHANNEL, self._on_delta)

    def take(self) -> list[Delta]:
        """The fragments notified since the last take, in order."""
        taken, self._queue = self._queue, []
        return taken

    def put_back(self, deltas: list[Delta]) -> None:
        """Keep ``deltas`` for the next round (ahead of newer ones), which comes at once."""
        if deltas:
            self._queue[:0] = deltas
            self._hint.poke()


class _LiveText:
    """What one reader showed of the thread's live text, across its connections; each round
    reads the records and places the text among them.

    The order it keeps: a step's fragments come before the record that closes the step (its
    ``tool-result``, or the submission's ``settlement`` if the step never completed), since the
    worker writes a step's last words before it journals the response. A round takes the
    fragments notified before it reads the records (all committed before that read) and shows
    them, each before the record of this read that closes its step, else after the records;
    of the fragments notified while it read (Postgres sends every notification committed before
    the statement ended ahead of its result), it shows those whose step closes in this read and
    keeps the others for the next round, after the next read, so that no text comes before a
    record committed before it. What is new of each fragment (once, with ``restart`` when a
    step starts over) is the `DeltaTracker`'s to say; a fragment it cannot place sends the
    round to the rows (`Deltas.so_far`).

    Text it never shows: a fragment of an older attempt than one it saw (a late notification
    of a cut-off attempt), of a step already closed, or of a step that closed before the reader
    showed any of it (it completed before the reader arrived: its record says it all).
    """

    def __init__(self, thread_id: str) -> None:
        self._thread_id = thread_id
        self._tracker = DeltaTracker()
        self._epochs: dict[_Key, int] = {}
        """The latest attempt seen of each step the reader follows."""
        self._closed: set[_Key] = set()
        self._settled: set[str] = set()
        """Submissions the reader saw settle while it followed (or had text of theirs)."""

    async def round(
        self, conn: Connection, notes: _Notes, after: int, *, catch_up: bool
    ) -> list[dict[str, Any] | TextDelta]:
        """The records above ``after`` with the live text to show among them; with
        ``catch_up`` (a new connection), first the text so far of each streaming step."""
        rows = await Deltas.so_far(conn, self._thread_id) if catch_up else []
        early = notes.take()
        records = await records_after(conn, self._thread_id, after)
        during = notes.take()
        closes, settles = await self._closes(conn, records, [*rows, *early, *during])
        notes.put_back([d for d in during if _key(d) not in closes])
        # A step that closes here and that the reader showed nothing of: its record says it.
        self._closed |= {_key(r) for r in rows if _key(r) in closes} - set(self._epochs)
        fresh = self._tracker.catch_up(self._current(rows))
        unplaced, notes.overflow = notes.overflow, False
        for delta in self._current([*early, *(d for d in during if _key(d) in closes)]):
            try:
                shown = self._tracker.apply(delta)
            except Resync:
                unplaced = True
                continue
            if shown is not None:
                fresh.append(shown)
        if unplaced:  # read the rows (of the steps still streaming: its record says a closed one)
            rows = await Deltas.so_far(conn, self._thread_id)
            # Of the steps this round knows: one that began since may not have its record yet.
            rows = [r for r in rows if _key(r) in self._epochs]
            fresh += self._tracker.catch_up(self._current(rows))
        return self._placed(records, fresh, closes, settles)

    async def _closes(
        self, conn: Connection, records: list[dict[str, Any]], deltas: list[Delta]
    ) -> tuple[dict[_Key, int], set[str]]:
        """Which of the steps of ``deltas`` and of those followed close in ``records`` (each
        with the index of the record that closes it), and which of their submissions settle."""
        keys = {_key(d) for d in deltas} | set(self._epochs)
        submissions = {key[0] for key in keys}
        results = [
            r["sequence"]
            for r in records
            if r["kind"] == "tool-result" and r["submission_id"] in submissions
        ]
        steps: dict[int, int] = {}
        if results:
            rows = await conn.fetch(_RESULT_STEPS, self._thread_id, results)
            steps = {row["sequence"]: row["step"] for row in rows if row["step"] is not None}
        closes: dict[_Key, int] = {}
        settles: dict[str, int] = {}
        for index, record in enumerate(records):
            step = steps.get(record["sequence"])
            if step is not None:
                closes.setdefault((record["submission_id"], step), index)
            elif record["kind"] == "settlement" and record["submission_id"] in submissions:
                settles.setdefault(record["submission_id"], index)
        for key in keys:  # a step that never completed closes with its submission
            if key[0] in settles:
                closes.setdefault(key, settles[key[0]])
        return closes, set(settles)

    def _current(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` less those of a closed step or of an older attempt than one seen."""
        current = []
        for delta in deltas:
            key = _key(delta)
            if key in self._closed or delta.submission_id in self._settled:
                continue
            if delta.epoch < self._epochs.get(key, delta.epoch):
                continue
            self._epochs[key] = delta.epoch
            current.append(delta)
        return current

    def _placed(
        self,
        records: list[dict[str, Any]],
        fresh: list[Delta],
        closes: dict[_Key, int],
        settles: set[str],
    ) -> list[dict[str, Any] | TextDelta]:
        """The records, each after the text of the steps it closes; the other text after them.
        The steps closed are forgotten (their late notifications are ignored)."""
        before: dict[int, list[TextDelta]] = {}
        rest: list[TextDelta] = []
        for delta in fresh:
            index = closes.get(_key(delta))
            (rest if index is None else before.setdefault(index, [])).append(_public(delta))
        placed: list[dict[str, Any] | TextDelta] = []
        for index, record in enumerate(records):
            placed += before.get(index, [])
            placed.append(record)
        self._settled |= settles
        self._closed |= set(closes)
        for key in [key for key in self._epochs if key in closes or key[0] in settles]:
            del self._epochs[key]
            self._tracker.done(*key)
        return placed + rest


def _key(delta: Delta) -> _Key:
    return delta.submission_id, delta.step


def _public(delta: Delta) -> TextDelta:
    return TextDelta(
        submission_id=delta.submission_id,
        step=delta.step,
        text=delta.text or "",
        restart=delta.restart,
    )


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
    shown = _LiveText(thread_id) if live and text else None
    last = 0
    while True:
        held = False
        try:
            async with (
                pool.acquire() as conn,
                _Hint(conn, lambda note: note.get("thread_id") == thread_id) as hint,
                contextlib.AsyncExitStack() as stack,
            ):
                notes = (
                    None
                    if shown is None
                    else await stack.enter_async_context(_Notes(conn, thread_id, hint))
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
        except _CONNECTION_LOST as error:
            if not held:  # no connection to be had: the database is away, tell the caller
                raise
            logger.warning("feed of %s lost its connection, resuming: %s", thread_id, error)


async def follow_records(
    pool: asyncpg.Pool[Any],
    thread_id: str,
    *,
    live: bool = True,
    recheck_s: float | None = None,
    wait_for_thread: bool = False,
) -> AsyncGenerator[dict[str, Any], None]:
    """The thread's records only (`follow_thread` without live text)."""
    feed = follow_thread(
        pool, thread_id, live=live, recheck_s=recheck_s, wait_for_thread=wait_for_thread
    )
    async with contextlib.aclosing(feed):
        async for item in feed:
            assert isinstance(item, dict)
            yield item


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


class RecordFeed:
    """A thread's records: ``async for`` yields `FeedRecord` models, the committed ones in
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

    async def __aiter__(self) -> AsyncIterator[FeedRecord]:
        feed = follow_records(
            self._pool,
            self._thread_id,
            recheck_s=self._recheck_s,
            wait_for_thread=self._wait_for_thread,
        )
        async with contextlib.aclosing(feed):
            async for record in feed:
                yield FeedRecord.model_validate(record)


class ThreadStream:
    """A thread's records and live text: ``async for`` yields `FeedRecord` models (as
    `RecordFeed` does: the committed ones in order, then each new one) and, among them,
    `TextDelta` models: for each step that streams, first its text so far, then each new
    fragment, all before the step's journaled response. It never ends on its own.

    Breaking out of the loop (or ``aclose`` through ``contextlib.aclosing``) gives its
    connection back. Iterating raises `NotFound` for an unknown thread (with
    ``wait_for_thread``, waits for it instead).
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

    async def __aiter__(self) -> AsyncIterator[FeedRecord | TextDelta]:
        feed = follow_thread(
            self._pool,
            self._thread_id,
            recheck_s=self._recheck_s,
            wait_for_thread=self._wait_for_thread,
            text=True,
        )
        async with contextlib.aclosing(feed):
            async for item in feed:
                yield item if isinstance(item, TextDelta) else FeedRecord.model_validate(item)
