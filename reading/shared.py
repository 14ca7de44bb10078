"""One listener on the ledger shared by many readers (the console's): every live reader it
serves rides one connection.

A timeline in the browser, an API event stream and a ``result?wait=`` each subscribe to a
thread here and get a hint (an `asyncio.Event`) when a record of that thread commits
(`COMMITTED_CHANNEL`); they read the records themselves from the pool, a short statement at a
time, and hold no connection while they wait or while their client reads slowly. So 1,000 open
streams cost one listening connection, and a slow reader never holds up a worker (nothing is
queued for it: it reads again from its last sequence when it is ready).

A notification is only a hint (see `threadwarden.reading.feed`): readers read again at least
every `RECHECK_S`, and when the listening connection is lost every reader is woken, and the
listener reconnects with a backoff. Live text is placed as every reader's is (`TextPlacer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncGenerator, Coroutine, Iterator
from typing import Any

import asyncpg

from threadwarden.ledger.deltas import DELTA_CHANNEL
from threadwarden.ledger.records import COMMITTED_CHANNEL
from threadwarden.ledger.status import records_after
from threadwarden.reading.feed import RECHECK_S
from threadwarden.reading.placing import Item, TextPlacer
from threadwarden.reading.text import NotedDeltas, parse_notification

logger = logging.getLogger(__name__)

MAX_STREAMS = 1_000
"""Live readers served at once by one console; one more is refused (503)."""
READ_BATCH = 500
"""Records one read takes; a reader far behind catches up a batch at a time."""
COALESCE_S = 0.2
"""A reader woken again for records within this long of its last read waits out the rest of it:
one read folds the records a pass commits back to back (each commit notifies), while a record
that follows a quiet spell is read at once. Live text is not held by it: a fragment notified
meanwhile goes out at once (a model's first words would otherwise wait up to this long)."""
RECONNECT_S = (0.1, 0.5, 1.0, 2.0, 5.0)
"""Waits between attempts to listen again after the connection was lost."""


class Subscription(asyncio.Event):
    """One reader's hint, and the live text notified since it last looked."""

    def __init__(self, *, live: bool) -> None:
        super().__init__()
        self.live = live
        """Whether live text wakes it and is collected for it (a stream's reader, not a
        ``result?wait=``)."""
        self.text = NotedDeltas(self.set)
        """The live text notified since the reader last looked (a live reader's only)."""
        self.records = True
        """The thread may have new records (else only live text woke the reader: a delta
        costs it no read of the records)."""


class StreamsFull(Exception):
    """`MAX_STREAMS` readers follow already: the stream is refused (it may retry later)."""


class LedgerFeed:
    """Hints per thread from one LISTEN connection, taken from ``pool`` when first needed."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        *,
        recheck_s: float = RECHECK_S,
        coalesce_s: float = COALESCE_S,
    ) -> None:
        self._pool = pool
        self.recheck_s = recheck_s
        self.coalesce_s = coalesce_s
        self._waiters: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._reads: set[asyncio.Future[tuple[list[Item], bool]]] = set()
        """The readers' reads in flight (`end_streams` cancels them)."""
        self.readers = 0
        self.listening = asyncio.Event()
        """Set while the feed LISTENs (notifications committed from then on reach readers)."""

    @contextlib.contextmanager
    def subscribe(self, thread_id: str, *, live: bool = False) -> Iterator[Subscription]:
        """A hint set whenever the thread may have new records (clear it before reading); with
        ``live``, also live text, which its ``deltas`` collect meanwhile."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="console-ledger-feed")
        hint = Subscription(live=live)
        self._waiters.setdefault(thread_id, set()).add(hint)
        self.readers += 1
        try:
            yield hint
        finally:
            self.readers -= 1
            waiting = self._waiters.get(thread_id)
            if waiting is not None:
                waiting.discard(hint)
                if not waiting:
                    del self._waiters[thread_id]

    @property
    def full(self) -> bool:
        """Whether `MAX_STREAMS` readers are subscribed (a new stream is refused)."""
        return self.readers >= MAX_STREAMS

    async def follow(
        self, thread_id: str, after: int, *, idle_s: float | None = None, live: bool = False
    ) -> AsyncGenerator[Item | None, None]:
        """The thread's records above sequence ``after`` in order, then each new one, until
        `end_streams`; a thread that does not exist yet is waited for. With ``idle_s``, yields
        None after each ``idle_s`` without a record (a stream's keep-alive). With ``live``, also
        the live text of the steps that stream (`TextDelta`: first each one's text so far, then
        its new fragments, placed by `TextPlacer`)."""
        loop = asyncio.get_running_loop()
        last = after
        if self.full:  # checked and subscribed with no await between: a burst cannot pass
            raise StreamsFull(f"{MAX_STREAMS} live readers already")
        placer = TextPlacer(thread_id) if live else None
        with self.subscribe(thread_id, live=live) as hint:
            quiet_since = loop.time()
            read_at = -self.coalesce_s
            catch_up = live
            while not self._closing:
                read = hint.records  # else only live text woke it: no read of the records
                if read and (fold := read_at + self.coalesce_s - loop.time()) > 0:
                    # Records again so soon (a pass is committing): their read waits out the
                    # rest of the fold, but live text that comes meanwhile goes out at once.
                    read = await self._folded(hint, fold)
                    if self._closing:
                        break
                hint.clear()
                if read:
                    hint.records, read_at = False, loop.time()
                found = await self._unless_closing(
                    self._round(placer, hint, thread_id, last, catch_up=catch_up, read=read)
                )
                if found is None:  # the console stops: the stream ends now, its read dropped
                    break
                items, complete = found
                catch_up = catch_up and not complete
                for item in items:
                    if isinstance(item, dict):
                        last = item["sequence"]
                        quiet_since = loop.time()
                    yield item
                if not complete:  # a reader far behind catches up a batch at a time
                    hint.records = True
                    continue
                if hint.records:  # still to read, once the fold is over
                    continue
                await self._wait(hint, quiet_since, idle_s)
                if idle_s is not None and loop.time() - quiet_since >= idle_s:
                    quiet_since = loop.time()
                    yield None

    async def _folded(self, hint: Subscription, fold_s: float) -> bool:
        """Wait out ``fold_s`` before a read of the records (True), unless live text for the
        reader comes first (False: it goes out now, the records after the fold)."""
        if not hint.live:
            await asyncio.sleep(fold_s)
            return True
        loop = asyncio.get_running_loop()
        until = loop.time() + fold_s
        while not self._closing and (left := until - loop.time()) > 0:
            if hint.text.pending:
                return False
            hint.clear()  # a record's hint changes nothing here; a fragment's ends the wait
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hint.wait(), left)
        return True

    async def _wait(self, hint: Subscription, quiet_since: float, idle_s: float | None) -> None:
        """Until a hint, the next keep-alive (``idle_s`` after ``quiet_since``) or the recheck
        (then the records are read anyway: a late or lost notification)."""
        wait_s = self.recheck_s
        if idle_s is not None:
            wait_s = min(wait_s, max(quiet_since + idle_s - asyncio.get_running_loop().time(), 0))
        try:
            await asyncio.wait_for(hint.wait(), wait_s)
        except TimeoutError:
            hint.records = True

    async def _round(
        self,
        placer: TextPlacer | None,
        hint: Subscription,
        thread_id: str,
        after: int,
        *,
        catch_up: bool,
        read: bool,
    ) -> tuple[list[Item], bool]:
        """One read of a reader: its records (with ``placer``, and its live text) and whether
        the read reached the last record."""
        if placer is not None:
            return await placer.round(
                self._pool, hint.text, after, catch_up=catch_up, read=read, limit=READ_BATCH
            )
        if not read:
            return [], True
        rows = await records_after(self._pool, thread_id, after, limit=READ_BATCH)
        return list(rows), len(rows) < READ_BATCH

    async def _unless_closing(
        self, read: Coroutine[Any, Any, tuple[list[Item], bool]]
    ) -> tuple[list[Item], bool] | None:
        """``read``'s result, or None when `end_streams` cancelled it first: a read the ledger
        is slow to answer must not hold a stream open past the console's stop (the server would
        cut it off mid-response)."""
        task = asyncio.ensure_future(read)
        self._reads.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._closing and task.cancelled() and not (current and current.cancelling()):
                return None
            raise
        finally:
            self._reads.discard(task)

    def end_streams(self) -> None:
        """End every `follow` now (a read in flight is dropped), so that their responses finish
        cleanly before the server stops (a stream never ends on its own)."""
        self._closing = True
        for read in self._reads:
            read.cancel()
        self._wake(None)

    async def close(self) -> None:
        """Stop listening (the connection goes back to the pool)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _wake(self, thread_id: str | None) -> None:
        groups = self._waiters.values() if thread_id is None else [self._waiters.get(thread_id)]
        for hints in groups:
            for hint in hints or ():
                hint.records = True
                if thread_id is None:  # (re)listening: fragments notified meanwhile are lost
                    hint.text.overflow = True  # so a live reader reads the rows again
                hint.set()

    def _on_notify(self, *args: Any) -> None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            thread_id = json.loads(args[-1]).get("thread_id")
            if isinstance(thread_id, str):
                self._wake(thread_id)

    def _on_delta(self, *args: Any) -> None:
        parsed = parse_notification(str(args[-1]))
        if parsed is None:
            return
        thread_id, delta = parsed
        for hint in self._waiters.get(thread_id, ()):
            if not hint.live:
                continue
            hint.text.add(delta)  # a slow reader's overflow: it reads the rows when it comes round

    async def _listen(self) -> None:
        failures = 0
        while True:
            lost = asyncio.Event()
            try:
                async with self._pool.acquire() as conn:
                    conn.add_termination_listener(functools.partial(_set, lost))
                    await conn.add_listener(COMMITTED_CHANNEL, self._on_notify)
                    await conn.add_listener(DELTA_CHANNEL, self._on_delta)
                    failures = 0
                    self.listening.set()
                    self._wake(None)  # anything committed before the LISTEN: read again
                    try:
                        await lost.wait()
                    finally:
                        self.listening.clear()
                        if not conn.is_closed():
                            with contextlib.suppress(Exception):
                                await conn.remove_listener(COMMITTED_CHANNEL, self._on_notify)
                                await conn.remove_listener(DELTA_CHANNEL, self._on_delta)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the database is away: readers recheck, we retry
                logger.warning("console: ledger notifications lost, listening again: %s", error)
            self._wake(None)
            await asyncio.sleep(RECONNECT_S[min(failures, len(RECONNECT_S) - 1)])
            failures += 1


def _set(event: asyncio.Event, *_: object) -> None:
    event.set()
