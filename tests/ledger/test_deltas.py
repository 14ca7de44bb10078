"""Live text's ledger side (issue 31): one statement appends a fragment and announces it with
its offset; a new epoch starts the step over; a reader's tracker shows each step's text once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import Ledger
from threadwarden.ledger.deltas import DELTA_CHANNEL, Deltas
from threadwarden.reading.text import (
    Delta,
    DeltaTracker,
    Resync,
    parse_notification,
    text_so_far,
)


def _delta(text: str | None, offset: int, epoch: int = 1, step: int = 1) -> Delta:
    return Delta(submission_id="s", step=step, epoch=epoch, offset=offset, text=text)


async def test_write_appends_announces_the_offset_and_a_new_epoch_starts_over(
    pool: asyncpg.Pool[Any], database_url: str, ids: str
) -> None:
    sub = await Ledger.defaults(pool).admit(ids)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(database_url)
    await listener.add_listener(DELTA_CHANNEL, lambda *args: heard.put_nowait(args[-1]))
    try:
        deltas = Deltas(pool)
        await deltas.write(ids, sub, 1, 1, "hello ")
        await deltas.write(ids, sub, 1, 1, "world")
        notes = [parse_notification(await asyncio.wait_for(heard.get(), 10)) for _ in range(2)]
        assert [(d.offset, d.text) for _, d in filter(None, notes)] == [(0, "hello "), (6, "world")]
        async with pool.acquire() as conn:
            [row] = await text_so_far(conn, ids)
        assert (row.text, row.epoch) == ("hello world", 1)

        await deltas.write(ids, sub, 1, 2, "again")  # a re-run of the step
        note = parse_notification(await asyncio.wait_for(heard.get(), 10))
        assert note is not None and (note[1].offset, note[1].epoch) == (0, 2)
        async with pool.acquire() as conn:
            [row] = await text_so_far(conn, ids)
        assert row.text == "again"

        await deltas.write(ids, sub, 1, 2, "x" * 7_000)  # past a NOTIFY's payload
        note = parse_notification(await asyncio.wait_for(heard.get(), 10))
        assert note is not None and note[1].text is None  # readers read the row instead
        await deltas.clear(sub, 1)
        async with pool.acquire() as conn:
            assert await text_so_far(conn, ids) == []
        await deltas.write(ids, sub, 2, 2, "left behind")  # then the submission settles
        await pool.execute(
            "UPDATE threadwarden.submissions SET state = 'settled', outcome = 'aborted'"
            " WHERE submission_id = $1",
            sub,
        )
        async with pool.acquire() as conn:
            assert await text_so_far(conn, ids) == []  # a settled one's text is not live
    finally:
        await listener.close()


def test_the_tracker_shows_each_step_once_in_any_order() -> None:
    tracker = DeltaTracker()
    [first] = tracker.catch_up([_delta("hello ", 0)])  # a reader arriving mid-step
    assert (first.offset, first.text) == (0, "hello ")
    assert tracker.apply(_delta("hello ", 0)) is None  # already shown
    overlap = tracker.apply(_delta("lo world", 3))
    assert overlap is not None and (overlap.offset, overlap.text) == (6, "world")
    with pytest.raises(Resync):
        tracker.apply(_delta("!", 20))  # a gap: read the row again
    with pytest.raises(Resync):
        tracker.apply(_delta(None, 11))  # too long to announce
    [rest] = tracker.catch_up([_delta("hello world and more", 0)])
    assert (rest.offset, rest.text) == (11, " and more")
    restarted = tracker.apply(_delta("again", 0, epoch=2))
    assert restarted is not None and restarted.restart and restarted.text == "again"


def test_a_notification_that_is_not_live_text_is_ignored() -> None:
    assert parse_notification("not json") is None
    assert parse_notification(json.dumps({"thread_id": "t"})) is None


def test_the_tracker_ignores_a_late_fragment_of_an_older_attempt() -> None:
    tracker = DeltaTracker()
    tracker.catch_up([_delta("re-run text", 0, epoch=2)])
    assert tracker.apply(_delta("cut-off text", 0, epoch=1)) is None
    assert tracker.catch_up([_delta("cut-off text", 0, epoch=1)]) == []
    more = tracker.apply(_delta(" goes on", 11, epoch=2))
    assert more is not None and not more.restart and more.text == " goes on"


async def test_an_older_attempts_late_write_changes_nothing(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    sub = await Ledger.defaults(pool).admit(ids)
    deltas = Deltas(pool)
    await deltas.write(ids, sub, 1, 2, "the re-run")
    await deltas.write(ids, sub, 1, 1, "a cut-off attempt, late")
    async with pool.acquire() as conn:
        [row] = await text_so_far(conn, ids)
    assert (row.epoch, row.text) == (2, "the re-run")
