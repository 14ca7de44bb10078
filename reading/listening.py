"""A reader's hints on its own pooled connection (the client's feeds, ``watch``): LISTEN on
`COMMITTED_CHANNEL` and be woken by a notification that matches, or by the connection's
termination; with live text, LISTEN on `DELTA_CHANNEL` too (`DeltaNotes`).

A notification is only a hint to read the ledger again (`threadwarden.reading.feed` says how its
readers wait on it); this module registers and drops the listeners, so that a connection goes
back to the pool with nothing LISTENed. (The console's readers share one listener instead:
`threadwarden.reading.shared`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import asyncpg

from threadwarden.ledger.deltas import DELTA_CHANNEL
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import COMMITTED_CHANNEL
from threadwarden.reading.text import NotedDeltas, parse_notification

CONNECTION_LOST = (
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
    ConnectionError,
)
"""What a read or a wait raises when its connection went away (a reader resumes on another)."""


async def unlisten(conn: Connection, channel: str, callback: Callable[..., None]) -> None:
    """``UNLISTEN`` ``callback`` on ``channel``, unless the connection is gone already."""
    if not conn.is_closed():
        with contextlib.suppress(*CONNECTION_LOST, asyncpg.InterfaceError):
            await conn.remove_listener(channel, callback)


class Hint:
    """Set by a committed record's notification that matches (its ``{"thread_id", "kind"}``),
    or by the connection's termination."""

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

    async def __aenter__(self) -> Hint:
        self._conn.add_termination_listener(self._on_terminate)
        await self._conn.add_listener(COMMITTED_CHANNEL, self._on_notify)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._conn.remove_termination_listener(self._on_terminate)
        await unlisten(self._conn, COMMITTED_CHANNEL, self._on_notify)

    def clear(self) -> None:
        """Forget earlier hints; call it before reading, so one during the read counts."""
        self._event.clear()

    async def wait(self, at_most_s: float) -> None:
        """Until a hint arrives or ``at_most_s`` passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), max(at_most_s, 0))


class DeltaNotes(NotedDeltas):
    """LISTEN on `DELTA_CHANNEL` on a reader's own connection: the thread's fragments notified
    since the reader last took them (each one also ``poke``s the reader)."""

    def __init__(self, conn: Connection, thread_id: str, poke: Callable[[], None]) -> None:
        super().__init__(poke)
        self._conn = conn
        self._thread_id = thread_id

    def _on_delta(self, *args: Any) -> None:
        parsed = parse_notification(str(args[-1]))
        if parsed is not None and parsed[0] == self._thread_id:
            self.add(parsed[1])

    async def __aenter__(self) -> DeltaNotes:
        await self._conn.add_listener(DELTA_CHANNEL, self._on_delta)
        return self

    async def __aexit__(self, *_: object) -> None:
        await unlisten(self._conn, DELTA_CHANNEL, self._on_delta)
