"""Host work marked durably for the host plug-in: the mark arms the alarm in its own statement
(the host is not made dirty), so the work gets its wave when the wake is lost, and a pass
finishing meanwhile cannot clear it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tests.helpers.checks import host_row
from tests.helpers.hosts import FakeHost
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.ledger.host_work import HostWork

WAVE_ALLOWANCE = 30_000
"""Long enough that a finish never cuts off a wave still waiting for an activity slot on a loaded
machine (the tests count waves; a cut-off before the start is a correct, uncounted wave)."""


async def _row(pool: asyncpg.Pool[Any], host_id: str) -> dict[str, Any]:
    row = await host_row(pool, host_id)
    assert row is not None
    return row


async def _mark_taken(pool: asyncpg.Pool[Any], host_id: str, what: str) -> dict[str, Any]:
    """Wait until a wave took the host's mark and the alarm cleared; the host row."""
    return await eventually(
        lambda: _row(pool, host_id),
        lambda r: r["host_work_due_at"] is None and r["alarm_at"] is None,
        what=what,
    )


async def test_host_work_mark_alone_brings_the_wave_when_the_wake_is_lost(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    host = FakeHost(WAVE_ALLOWANCE)
    async with workers.running(host=host):
        await idle_host(client, workers.connections, ids)
        before, waves = await _row(pool, ids), host.waves[ids]
        # Marked through the ledger alone: no signal is sent (a lost wake).
        moved = await HostWork(pool, minimum_alarm_delay_ms=50).mark_due(ids)
        marked = await _row(pool, ids)
        assert marked["alarm_at"] is not None and marked["host_work_due_at"] is not None
        assert moved, (before, marked)
        assert (marked["dirty"], marked["processed"]) == (before["dirty"], before["processed"])
        row = await _mark_taken(pool, ids, "the mark taken by a wave and the alarm cleared")
        assert host.waves[ids] == waves + 1  # the sweeper fired the alarm: one caught-up pass
        assert (row["dirty"], row["processed"]) == (before["dirty"], before["processed"])


async def test_host_work_marked_while_a_pass_finishes_is_not_lost(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    host, failpoints = FakeHost(WAVE_ALLOWANCE), workers.failpoints
    # The waves are counted: no sweeper wake may add a pass. Its 1 s grace can pass while this
    # pass is held at its finish on a busy machine; the mark's own alarm is what brings the
    # next pass here.
    async with workers.tuned(sweep_grace_ms=30_000).running(host=host):
        await idle_host(client, workers.connections, ids)
        waves = host.waves[ids]
        failpoints.arm("maintenance:finish:before", pause=True, times=1)
        await client.wake(ids, reason="test")  # a caught-up pass with nothing due
        await failpoints.reached("maintenance:finish:before")
        assert host.waves[ids] == waves + 1
        await HostWork(pool, minimum_alarm_delay_ms=50).mark_due(ids)  # no wake
        failpoints.release("maintenance:finish:before")
        await _mark_taken(pool, ids, "the mark taken by the next pass's wave")
        assert host.waves[ids] == waves + 2


async def test_host_work_for_later_arms_the_alarm_at_its_time(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    async with workers.running(host=FakeHost(WAVE_ALLOWANCE)):
        await idle_host(client, workers.connections, ids)
        workers.failpoints.arm("maintenance:finish:after", observe=True)
        at = datetime.now(UTC) + timedelta(minutes=5)
        await client.host_work_due(ids, at)  # moves the alarm earlier, so it wakes the host
        await eventually(
            lambda: _ready(workers.failpoints.hits.get("maintenance:finish:after", 0)),
            lambda finished: finished >= 1,
            what="a pass after the wake",
        )
        row = await _row(pool, ids)
        assert row["host_work_due_at"] is not None  # not due yet: no wave took it
        assert abs(row["host_work_due_at"] - at) <= timedelta(milliseconds=1)
        assert abs(row["alarm_at"] - at) <= timedelta(milliseconds=1)
        assert row["dirty"] == row["processed"]


async def test_a_failed_wave_puts_its_mark_back(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    host = FakeHost(WAVE_ALLOWANCE)
    # The waves are counted: no sweeper wake may add a pass (see the test above).
    async with workers.tuned(sweep_grace_ms=30_000).running(host=host):
        await idle_host(client, workers.connections, ids)
        waves = host.waves[ids]
        host.failing = True
        await client.host_work_due(ids)
        await _mark_taken(pool, ids, "the mark taken by a wave that succeeded")
        assert host.waves[ids] == waves + 2  # the failed wave, then the retry with the mark back
        assert (await client.host_status(ids)).last_error is None


@pytest.mark.usefixtures("worker")
async def test_host_work_without_a_plug_in_is_taken_and_the_alarm_clears(
    client: ThreadwardenClient, connections: Connections, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await idle_host(client, connections, ids)
    await client.host_work_due(ids)
    await _mark_taken(pool, ids, "the mark taken and the alarm cleared")


async def _ready(value: int) -> int:
    return value
