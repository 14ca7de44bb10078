"""The sweeper's schedule: overdue hosts now, otherwise the next alarm (or lapsing lease)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from threadwarden.activities.sweep import next_sweep_ms
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.sweep import NEXT_DUE, OVERDUE, Sweeps
from threadwarden.protocol.decisions import Timing

GRACE = 2_000


async def _alarm_in(pool: asyncpg.Pool[Any], host_id: str, interval: str | None) -> None:
    await pool.execute(
        "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() + $2::text::interval"
        " WHERE host_id = $1",
        host_id,
        interval,
    )


async def test_nothing_armed_means_nothing_due(pool: asyncpg.Pool[Any], ids: str) -> None:
    await Admissions(pool, minimum_alarm_delay_ms=50).admit(
        thread_id=f"{ids}-a", agent_id="echo", input={}
    )
    await _alarm_in(pool, f"{ids}-a", None)
    scan = await Sweeps(pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []
    assert scan.next_due_ms is None


async def test_the_earliest_future_alarm_plus_the_grace_is_next(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    for name in ("hour", "minute", "overdue"):
        await admissions.admit(thread_id=f"{ids}-{name}", agent_id="echo", input={})
    await _alarm_in(pool, f"{ids}-hour", "1 hour")
    await _alarm_in(pool, f"{ids}-minute", "1 minute")
    await _alarm_in(pool, f"{ids}-overdue", "-1 minute")
    scan = await Sweeps(pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == [f"{ids}-overdue"]
    assert scan.next_due_ms is not None
    # The minute alarm, plus the grace, less the few milliseconds this test took so far.
    assert 50_000 < scan.next_due_ms <= 60_000 + GRACE


async def test_an_alarm_inside_the_grace_is_due_within_the_grace(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    await Admissions(pool, minimum_alarm_delay_ms=50).admit(
        thread_id=f"{ids}-a", agent_id="echo", input={}
    )
    await _alarm_in(pool, f"{ids}-a", "-1 second")  # overdue, but not by more than the grace
    scan = await Sweeps(pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []
    assert scan.next_due_ms is not None and scan.next_due_ms <= 1_000


async def test_an_overdue_host_with_a_live_lease_is_due_when_the_lease_lapses(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    host = f"{ids}-busy"
    maintenance = Maintenance(pool, Timing())
    await Admissions(pool, minimum_alarm_delay_ms=50).admit(
        thread_id=host, agent_id="echo", input={}
    )
    begun = await maintenance.begin(host, datetime.now(UTC))
    claim = await Attempts(pool, lease_ms=30_000).claim_head(
        host, begun.epoch, host, bindings={"echo": "d"}
    )
    assert claim is not None
    await _alarm_in(pool, host, "-1 minute")
    scan = await Sweeps(pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []  # being served
    assert scan.next_due_ms is not None
    assert 20_000 < scan.next_due_ms <= 30_000  # the 30 s lease, less this test's time so far


async def test_overdue_hosts_alone_as_before(pool: asyncpg.Pool[Any], ids: str) -> None:
    await Admissions(pool, minimum_alarm_delay_ms=50).admit(
        thread_id=f"{ids}-a", agent_id="echo", input={}
    )
    await _alarm_in(pool, f"{ids}-a", "-1 minute")
    assert await Sweeps(pool).overdue_hosts(grace_ms=GRACE, limit=10) == [f"{ids}-a"]


@pytest.mark.parametrize(
    ("woken", "next_due", "expected"),
    [
        (3, None, 2_000),  # it woke hosts: more may be left, sweep again soon
        (3, 500_000, 2_000),
        (0, None, 90_000),  # nothing armed: the idle interval
        (0, 0, 2_000),  # something due now (a lease lapsing): soon, never busier than that
        (0, 1_500, 2_000),
        (0, 45_000, 45_000),  # sleep until that alarm is overdue
        (0, 500_000, 90_000),  # at most the idle interval
    ],
)
def test_next_sweep(woken: int, next_due: int | None, expected: int) -> None:
    assert (
        next_sweep_ms(woken=woken, next_due_ms=next_due, interval_ms=2_000, idle_interval_ms=90_000)
        == expected
    )


async def plan(pool: asyncpg.Pool[Any], query: str, *args: object) -> str:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch(f"EXPLAIN {query}", *args)
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("query", "args", "indexes"),
    [
        (OVERDUE, (GRACE, 500), ["hosts_alarm_at"]),
        (NEXT_DUE, (GRACE,), ["hosts_alarm_at"]),
    ],
)
async def test_the_sweepers_queries_use_their_indexes(
    pool: asyncpg.Pool[Any], query: str, args: tuple[object, ...], indexes: list[str]
) -> None:
    explained = await plan(pool, query, *args)
    for index in indexes:
        assert index in explained, f"{index} not used\n{explained}"
    assert "Seq Scan" not in explained, explained
