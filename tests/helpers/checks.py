"""Shared checks for end-to-end tests: settlement, convergence and the ledger rows behind them."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from ledger.models import HostStatus, ThreadStatus
from tests.helpers.polling import eventually
from threadwarden.failpoints import Failpoints
from worker.client import ThreadwardenClient


def say(text: str) -> list[dict[str, Any]]:
    """A scripted input that appends one message and completes."""
    return [{"say": text}]


async def settled(client: ThreadwardenClient, thread: str, count: int) -> ThreadStatus:
    """Wait until ``thread`` holds ``count`` submissions, all settled."""
    return await eventually(
        lambda: client.thread_status(thread),
        lambda s: len(s.submissions) == count and all(x.state == "settled" for x in s.submissions),
        timeout_s=60,
        what=f"{count} submission(s) of {thread} settled",
    )


async def assert_settled_once(client: ThreadwardenClient, thread: str, count: int) -> ThreadStatus:
    """The preamble invariants for one thread: one settlement each, FIFO, no stale writes."""
    status = await settled(client, thread, count)
    records = await client.records(thread)
    settlements = [r for r in records if r["kind"] == "settlement"]
    # Exactly one settlement per submission, recorded in admitted (queue) order.
    queue = [s.submission_id for s in status.submissions]
    assert [r["submission_id"] for r in settlements] == queue
    assert len({r["record_id"] for r in records}) == len(records)
    assert [r["sequence"] for r in records] == list(range(1, len(records) + 1))
    # A stale producer would show up as an older epoch after a newer one.
    epochs = [r["epoch"] for r in records]
    assert epochs == sorted(epochs), f"record epochs out of order: {epochs}"
    final_epoch = {s.submission_id: s.epoch for s in status.submissions}
    assert all(r["epoch"] == final_epoch[r["submission_id"]] for r in settlements)
    return status


async def converged(client: ThreadwardenClient, host: str) -> HostStatus:
    """Wait until the host acknowledged everything and cleared its alarm."""
    return await eventually(
        lambda: client.host_status(host),
        lambda h: h.processed == h.dirty and h.alarm_at is None and h.nonterminal == 0,
        timeout_s=60,
        what=f"host {host} caught up with its alarm cleared",
    )


def assert_autonomous_work_armed(host: HostStatus) -> None:
    """Autonomous leftovers keep the generation dirty and the alarm armed."""
    assert host.dirty > host.processed, host
    assert host.alarm_at is not None, host


async def reached_first(failpoints: Failpoints, expected: str, *instead: str) -> None:
    """Wait for ``expected``; fail at once (not at a timeout) when one of ``instead`` is first."""
    waiters = {
        asyncio.ensure_future(failpoints.reached(location, timeout_s=60)): location
        for location in (expected, *instead)
    }
    done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
    first = waiters[done.pop()]
    assert first == expected, f"{first} was reached before {expected}"


async def submission_rows(pool: asyncpg.Pool[Any], thread: str) -> list[dict[str, Any]]:
    """The raw submission rows of ``thread`` in sequence order."""
    rows = await pool.fetch(
        "SELECT * FROM threadwarden.submissions WHERE thread_id = $1 ORDER BY sequence", thread
    )
    return [dict(r) for r in rows]


async def host_row(pool: asyncpg.Pool[Any], host: str) -> dict[str, Any] | None:
    """The raw host row, or None when the host was never created."""
    row = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", host)
    return None if row is None else dict(row)


# --- scenario 1: faults around the mutation's commit ------------------------------------------


async def recorded_once(
    client: ThreadwardenClient, thread: str, outcomes: list[str]
) -> list[dict[str, Any]]:
    """All settled with ``outcomes`` in queue order; one settlement each; ids and epochs sane."""
    status = await settled(client, thread, len(outcomes))
    assert [s.outcome for s in status.submissions] == outcomes
    records = await client.records(thread)
    settlements = [r["submission_id"] for r in records if r["kind"] == "settlement"]
    assert sorted(settlements) == sorted(s.submission_id for s in status.submissions)
    assert len({r["record_id"] for r in records}) == len(records)
    assert [r["sequence"] for r in records] == list(range(1, len(records) + 1))
    epochs = [r["epoch"] for r in records]
    assert epochs == sorted(epochs), f"record epochs out of order: {epochs}"
    return records
