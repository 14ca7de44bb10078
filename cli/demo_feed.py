"""The demo's live record feed: one printed line per record published for the run's threads,
as LISTEN/NOTIFY brings it; and, from the live-text notifications, the steps whose text started
over (cut off mid-answer and run again: none expected)."""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from threadwarden.cli.output import print_line
from threadwarden.client.client import ThreadwardenClient
from threadwarden.ledger.deltas import DELTA_CHANNEL
from threadwarden.ledger.publication import NOTIFY_CHANNEL
from threadwarden.reading.text import parse_notification

FEED_CATCH_UP_S = 5.0
"""How long the demo waits, once everything settled, for the feed to show the last records
(publication runs after the commit, so it may trail the status a little)."""


Details = Callable[[dict[str, Any]], Awaitable[str]]
"""What a feed line adds to a record's kind (the tool a journal step names), looked up by
the record's thread and sequence: a notification carries no body."""


@dataclass
class DemoPrinter:
    """Prints each record published for this run's threads, as LISTEN/NOTIFY brings it: the
    same feed an application would follow, one short line per record. Lines are printed in the
    order the notifications came, by `show` (a task), so a line may add details read from the
    ledger (``tool-call model-request``: a model request an agent journaled)."""

    prefix: str
    details: Details
    seen: set[tuple[str, int]] = field(default_factory=set)
    queued: set[tuple[str, int]] = field(default_factory=set)
    pending: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    """The attempt (epoch) each step's live text came from: (submission, step) → epoch."""
    restarted: set[tuple[str, int]] = field(default_factory=set)
    """The steps whose live text came from two attempts: started over (a restart)."""

    def on_delta(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        """Note which attempt each step's live text comes from; a second one restarted it."""
        parsed = parse_notification(str(payload))
        if parsed is None or not parsed[0].startswith(self.prefix):
            return
        delta = parsed[1]
        key = (delta.submission_id, delta.step)
        if self.epochs.setdefault(key, delta.epoch) != delta.epoch:
            self.restarted.add(key)

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        record = json.loads(str(payload))
        key = (record["thread_id"], record["sequence"])
        if not record["thread_id"].startswith(self.prefix) or key in self.queued:
            return  # another run's record, or an at-least-once repeat
        self.queued.add(key)
        self.pending.put_nowait(record)

    async def show(self) -> None:
        """Print the notified records one by one, for ever (cancelled on exit)."""
        while True:
            record = await self.pending.get()
            try:
                detail = await self.details(record)
            except Exception:  # a line without its details rather than no more lines
                detail = ""
            print_line(
                f"  feed  {record['thread_id']:<21} #{record['sequence']:<3} {record['kind']}"
                + (f" {detail}" if detail else "")
            )
            self.seen.add((record["thread_id"], record["sequence"]))

    async def catch_up(self, client: ThreadwardenClient, threads: list[str]) -> int:
        """Wait (briefly) until every record of the threads was shown; return how many are
        still missing, so a slow publication shows up instead of being silently cut off."""
        expected = {
            (thread, record["sequence"])
            for thread in threads
            for record in await client.records(thread)
        }
        deadline = time.monotonic() + FEED_CATCH_UP_S
        while expected - self.seen and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return len(expected - self.seen)


def tool_names(client: ThreadwardenClient) -> Details:
    """Details naming the tool of a ``tool-call`` or ``tool-result`` record (none for other
    kinds). A thread's records are read again only for a record not read yet."""
    tools: dict[tuple[str, int], str] = {}

    async def details(record: dict[str, Any]) -> str:
        if record["kind"] not in ("tool-call", "tool-result"):
            return ""
        key = (record["thread_id"], record["sequence"])
        if key not in tools:
            for read in await client.records(record["thread_id"]):
                body = read["body"]
                if isinstance(body, dict) and isinstance(body.get("tool"), str):
                    tools[(record["thread_id"], read["sequence"])] = body["tool"]
        return tools.get(key, "")

    return details


@contextlib.asynccontextmanager
async def record_feed(
    database_url: str, prefix: str, details: Details
) -> AsyncIterator[DemoPrinter]:
    """Listen on a connection of its own (a pooled one would drop the LISTEN when released);
    closed on exit, before the stack stops."""
    feed = DemoPrinter(prefix, details)
    listener = await asyncpg.connect(database_url)
    shown = asyncio.create_task(feed.show())
    try:
        await listener.add_listener(NOTIFY_CHANNEL, feed.on_notify)
        await listener.add_listener(DELTA_CHANNEL, feed.on_delta)
        yield feed
    finally:
        shown.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await shown
        await listener.close()
