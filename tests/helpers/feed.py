"""Following a thread in tests: the readers waiting in the record feed's loop, the scripted
live-text answer that ``watch`` and `ThreadwardenClient.stream` show as it is generated, and a
deploy in the middle of it (the step starts over)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
from temporalio.worker import Worker

from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import FeedRecord
from threadwarden.config.settings import Settings
from threadwarden.ledger.status import _RECORDS_AFTER
from threadwarden.reading.text import TextDelta
from threadwarden.reading.text import text_so_far as rows_so_far

ANSWER = " ".join(f"word{n}" for n in range(40))
STREAM = [{"stream": ANSWER, "chunk_ms": 100}]
"""40 words, one every 100 ms: about 4 s of live text."""
DEADLINE_S = 60.0
KINDS = ["tool-call", "tool-result", "message", "settlement"]
"""The records of a one-step stream script."""


async def listening(pool: asyncpg.Pool[Any]) -> int:
    """Connections whose last statement is the record feed's read: watchers in their loop."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = $1",
            _RECORDS_AFTER,
        )
    )


async def text_so_far(pool: asyncpg.Pool[Any], thread_id: str) -> str:
    """The live text the thread's running step has shown so far (its rows in the ledger)."""
    async with pool.acquire() as conn:
        return "".join(row.text or "" for row in await rows_so_far(conn, thread_id))


ANSWER_INLINE_BUDGET_MS = 5_000
"""An inline budget `STREAM` fits in (it declares its 3.9 s): its attempt starts inline."""


def without_inline_heads(settings: Settings) -> Settings:
    """No inline heads: `STREAM` (longer than the default inline budget, and declared so) runs
    on the agent's queue from its first attempt."""
    return settings.model_copy(update={"inline_budget_ms": 0})


async def stopped_mid_answer(worker: Worker, pool: asyncpg.Pool[Any], thread_id: str) -> None:
    """A deploy mid-answer: once readers were shown some words of the thread's streaming step,
    ``worker`` stops gracefully (SIGTERM's path). Its attempt gives the head back at once and
    its text so far stays for readers; the next worker's attempt starts the step over."""
    await eventually(
        lambda: text_so_far(pool, thread_id),
        lambda text: len(text.split()) >= 5,
        timeout_s=DEADLINE_S,
        what="five words of the answer shown",
    )
    await worker.shutdown()


async def chunks_until(stream: asyncio.StreamReader, end: str) -> list[str]:
    """What ``stream`` gives, one piece per read, until the output holds ``end``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    pieces: list[str] = []
    while end not in "".join(pieces):
        piece = await asyncio.wait_for(stream.read(65_536), max(deadline - loop.time(), 0))
        assert piece, f"the output ended after {pieces}"
        pieces.append(piece.decode())
    return pieces


async def streamed_until_settled(
    client: ThreadwardenClient, thread_id: str, *, wait_for_thread: bool = False
) -> list[FeedRecord | TextDelta]:
    """What `ThreadwardenClient.stream` yields for the thread, up to its first settlement."""
    seen: list[FeedRecord | TextDelta] = []
    async for item in client.stream(thread_id, wait_for_thread=wait_for_thread):
        seen.append(item)
        if isinstance(item, FeedRecord) and item.kind == "settlement":
            return seen
    raise AssertionError(f"the stream ended after {seen}")
