"""The sweeper's schedule: overdue hosts now, otherwise the next alarm (or lapsing lease)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import Ledger, explain
from threadwarden.activities.sweep import next_sweep_ms
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.sweep import NEXT_DUE, OVERDUE, Sweeps

GRACE = 2_000


async def test_nothing_armed_means_nothing_due(ledger: Ledger, ids: str) -> None:
    await ledger.admit(ids)
    await ledger.alarm_in(ids, None)
    scan = await Sweeps(ledger.pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []
    assert scan.next_due_ms is None


async def test_the_earliest_future_alarm_plus_the_grace_is_next(ledger: Ledger, ids: str) -> None:
    alarms = {"hour": "1 hour", "minute": "1 minute", "overdue": "-1 minute"}
    for name, interval in alarms.items():
        await ledger.admit(f"{ids}-{name}")
        await ledger.alarm_in(f"{ids}-{name}", interval)
    scan = await Sweeps(ledger.pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == [f"{ids}-overdue"]
    assert scan.next_due_ms is not None
    # The minute alarm, plus the grace, less the few milliseconds this test took so far.
    assert 50_000 < scan.next_due_ms <= 60_000 + GRACE


async def test_an_alarm_inside_the_grace_is_due_within_the_grace(ledger: Ledger, ids: str) -> None:
    await ledger.admit(ids)
    await ledger.alarm_in(ids, "-1 second")  # overdue, but not by more than the grace
    scan = await Sweeps(ledger.pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []
    assert scan.next_due_ms is not None and scan.next_due_ms <= 1_000


async def test_an_overdue_host_with_a_live_lease_is_due_when_the_lease_lapses(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.alarm_in(ids, "-1 minute")
    scan = await Sweeps(ledger.pool).scan(grace_ms=GRACE, limit=10)
    assert scan.overdue == []  # being served
    assert scan.next_due_ms is not None
    assert 20_000 < scan.next_due_ms <= 30_000  # the 30 s lease, less this test's time so far


async def test_overdue_hosts_alone_as_before(ledger: Ledger, ids: str) -> None:
    await ledger.admit(ids)
    await ledger.alarm_in(ids, "-1 minute")
    assert await Sweeps(ledger.pool).overdue_hosts(grace_ms=GRACE, limit=10) == [ids]


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
    explained = await explain(pool, query, *args)
    for index in indexes:
        assert index in explained, f"{index} not used\n{explained}"
    assert "Seq Scan" not in explained, explained
