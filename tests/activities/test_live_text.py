"""An attempt's live text (`LiveText`) against the real ledger: ``flush`` waits for a write
under way (so ``finish`` is the last word on a journaled step's row), a step answered before its
first fragment was due writes nothing, and ``close`` removes the rows of steps the attempt never
journaled unless it was cut off."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from tests.helpers.ledger import Ledger
from tests.helpers.polling import eventually
from threadwarden.activities.live_text import LiveText
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.deltas import Deltas


class GatedDeltas(Deltas):
    """The real writes, each held until ``gate`` opens (a slow database round trip)."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        super().__init__(pool)
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.events: list[str] = []

    async def write(
        self, thread_id: str, submission_id: str, step: int, epoch: int, text: str
    ) -> None:
        self.started.set()
        await self.gate.wait()
        await super().write(thread_id, submission_id, step, epoch, text)
        self.events.append(f"write {text}")


async def _claim(pool: asyncpg.Pool[Any], ids: str) -> Claim:
    """A running attempt's claim on a fresh host's head."""
    ledger = Ledger.defaults(pool)
    await ledger.admit(ids)
    await ledger.begin(ids)
    return await ledger.claim(ids)


async def _rows(pool: asyncpg.Pool[Any], submission_id: str) -> list[tuple[int, str]]:
    rows = await pool.fetch(
        "SELECT step, text FROM threadwarden.deltas WHERE submission_id = $1 ORDER BY step",
        submission_id,
    )
    return [(row["step"], row["text"]) for row in rows]


async def test_flush_waits_for_a_write_under_way_so_finish_removes_the_row(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    claim = await _claim(pool, ids)
    deltas = GatedDeltas(pool)
    live = LiveText(deltas, claim)
    live.add(1, "hello")  # the step's first fragment: its write starts within FIRST_S
    await asyncio.wait_for(deltas.started.wait(), 10)

    async def open_gate() -> None:
        for _ in range(5):  # let a flush that does not wait return first
            await asyncio.sleep(0)
        deltas.gate.set()

    opener = asyncio.create_task(open_gate())
    await live.flush(1)
    deltas.events.append("flushed")
    await live.finish(1)
    await opener
    await live.close(keep=False)
    assert deltas.events == ["write hello", "flushed"]
    assert await _rows(pool, claim.submission_id) == []


async def test_close_removes_unjournaled_rows_unless_cut_off(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    claim = await _claim(pool, ids)
    deltas = GatedDeltas(pool)
    deltas.gate.set()

    cut_off = LiveText(deltas, claim)
    cut_off.add(2, "half an answer")
    await _written(pool, claim.submission_id, [(2, "half an answer")])
    await cut_off.close(keep=True)  # a deploy cut it off: readers keep the text so far
    assert await _rows(pool, claim.submission_id) == [(2, "half an answer")]

    failed = LiveText(deltas, claim)
    failed.add(2, " and more")
    await _written(pool, claim.submission_id, [(2, "half an answer and more")])
    await failed.close(keep=False)  # the binding failed mid-step: nothing is to show it again
    assert await _rows(pool, claim.submission_id) == []


async def test_a_step_answered_before_its_first_fragment_was_due_writes_nothing(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    """A quick model's whole response arrives within `FIRST_S`: the step writes nothing but
    its record (no row, no statement), while a step whose text readers saw gets its last words
    written before its record."""
    claim = await _claim(pool, ids)
    deltas = GatedDeltas(pool)
    deltas.gate.set()
    live = LiveText(deltas, claim)
    live.add(1, "the whole ")
    live.add(1, "answer")
    await live.flush(1)  # its response is journaled next, before the first fragment was due
    await live.finish(1)
    live.add(2, "seen ")
    await _written(pool, claim.submission_id, [(2, "seen ")])
    live.add(2, "and the rest")
    await live.flush(2)
    assert await _rows(pool, claim.submission_id) == [(2, "seen and the rest")]
    await live.finish(2)
    await live.close(keep=False)
    assert deltas.events == ["write seen ", "write and the rest"]
    assert await _rows(pool, claim.submission_id) == []


async def _written(
    pool: asyncpg.Pool[Any], submission_id: str, rows: list[tuple[int, str]]
) -> None:
    """Wait until the step's coalesced text is written as ``rows``."""
    await eventually(lambda: _rows(pool, submission_id), lambda found: found == rows)
