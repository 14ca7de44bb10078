"""Host work marked durably for the host plug-in: the mark arms the alarm in its own statement
(the host is not made dirty), so the work gets its wave when the wake is lost, and a pass
finishing meanwhile cannot clear it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tests.helpers.checks import quiescent, say, settled
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.host_work import HostWork
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings


class CountingHost:
    """A host plug-in that counts its waves; ``failing`` makes the next wave raise."""

    dispatch_timeout_ms = 30_000
    """Long enough that a finish never cuts off a wave still waiting for an activity slot on a
    loaded machine (the tests count waves; a cut-off before the start is a correct, uncounted
    wave)."""

    def __init__(self) -> None:
        self.waves = 0
        self.failing = False

    async def wave(self, host_id: str, *, dispatch_until: datetime) -> bool:
        self.waves += 1
        if self.failing:
            self.failing = False
            raise RuntimeError("relay down")
        return False

    async def pending_deadline(self, host_id: str) -> datetime | None:
        return None  # the plug-in relies on the marks alone


async def _row(pool: asyncpg.Pool[Any], host_id: str) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT dirty, processed, alarm_at, host_work_due_at FROM threadwarden.hosts"
        " WHERE host_id = $1",
        host_id,
    )
    assert row is not None
    return dict(row)


async def _idle_host(client: ThreadwardenClient, connections: Connections, ids: str) -> None:
    """Settle one submission and wait until the host's workflow completed: the tests count the
    waves of the passes that follow, so no pass of the settlement may still be to come."""
    await client.submit(ids, agent_id="scripted", input=say("hello"))
    await settled(client, ids, 1)
    await quiescent(client, connections, ids)


async def test_host_work_mark_alone_brings_the_wave_when_the_wake_is_lost(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    host = CountingHost()
    async with running_worker(settings, connections, host=host):
        await _idle_host(client, connections, ids)
        before, waves = await _row(pool, ids), host.waves
        # Marked through the ledger alone: no signal is sent (a lost wake).
        moved = await HostWork(pool, minimum_alarm_delay_ms=50).mark_due(ids)
        marked = await _row(pool, ids)
        assert marked["alarm_at"] is not None and marked["host_work_due_at"] is not None
        assert moved, (before, marked)
        assert (marked["dirty"], marked["processed"]) == (before["dirty"], before["processed"])
        row = await eventually(
            lambda: _row(pool, ids),
            lambda r: r["host_work_due_at"] is None and r["alarm_at"] is None,
            what="the mark taken by a wave and the alarm cleared",
        )
        assert host.waves == waves + 1  # the sweeper fired the alarm: one caught-up pass
        assert (row["dirty"], row["processed"]) == (before["dirty"], before["processed"])


async def test_host_work_marked_while_a_pass_finishes_is_not_lost(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    failpoints: Failpoints,
    ids: str,
) -> None:
    host = CountingHost()
    # The waves are counted: no sweeper wake may add a pass. Its 1 s grace can pass while this
    # pass is held at its finish on a busy machine; the mark's own alarm is what brings the
    # next pass here.
    quiet = settings.model_copy(update={"sweep_grace_ms": 30_000})
    async with running_worker(quiet, connections, failpoints=failpoints, host=host):
        try:
            await _idle_host(client, connections, ids)
            waves = host.waves
            failpoints.arm("maintenance:finish:before", pause=True, times=1)
            await client.wake(ids, reason="test")  # a caught-up pass with nothing due
            await failpoints.reached("maintenance:finish:before")
            assert host.waves == waves + 1
            await HostWork(pool, minimum_alarm_delay_ms=50).mark_due(ids)  # no wake
            failpoints.release("maintenance:finish:before")
            await eventually(
                lambda: _row(pool, ids),
                lambda r: r["host_work_due_at"] is None and r["alarm_at"] is None,
                what="the mark taken by the next pass's wave",
            )
            assert host.waves == waves + 2
        finally:
            failpoints.release_all()


async def test_host_work_for_later_arms_the_alarm_at_its_time(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    failpoints: Failpoints,
    ids: str,
) -> None:
    host = CountingHost()
    async with running_worker(settings, connections, failpoints=failpoints, host=host):
        await _idle_host(client, connections, ids)
        failpoints.arm("maintenance:finish:after", observe=True)
        at = datetime.now(UTC) + timedelta(minutes=5)
        await client.host_work_due(ids, at)  # moves the alarm earlier, so it wakes the host
        await eventually(
            lambda: _ready(failpoints.hits.get("maintenance:finish:after", 0)),
            lambda finished: finished >= 1,
            what="a pass after the wake",
        )
        row = await _row(pool, ids)
        assert row["host_work_due_at"] is not None  # not due yet: no wave took it
        assert abs(row["host_work_due_at"] - at) <= timedelta(milliseconds=1)
        assert abs(row["alarm_at"] - at) <= timedelta(milliseconds=1)
        assert row["dirty"] == row["processed"]


async def test_a_failed_wave_puts_its_mark_back(
    settings: Settings,
    connections: Connections,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    host = CountingHost()
    # The waves are counted: no sweeper wake may add a pass (see the test above).
    quiet = settings.model_copy(update={"sweep_grace_ms": 30_000})
    async with running_worker(quiet, connections, host=host):
        await _idle_host(client, connections, ids)
        waves = host.waves
        host.failing = True
        await client.host_work_due(ids)
        await eventually(
            lambda: _row(pool, ids),
            lambda r: r["host_work_due_at"] is None and r["alarm_at"] is None,
            what="the mark taken by a wave that succeeded",
        )
        assert host.waves == waves + 2  # the failed wave, then the retry with the mark back
        assert (await client.host_status(ids)).last_error is None


async def test_host_work_without_a_plug_in_is_taken_and_the_alarm_clears(
    worker: None,
    client: ThreadwardenClient,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    await _idle_host(client, connections, ids)
    await client.host_work_due(ids)
    await eventually(
        lambda: _row(pool, ids),
        lambda r: r["host_work_due_at"] is None and r["alarm_at"] is None,
        what="the mark taken and the alarm cleared",
    )


async def _ready(value: int) -> int:
    return value
