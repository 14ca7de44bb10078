"""The sweeper's query: overdue alarms, except hosts with a live attempt lease."""

from __future__ import annotations

from tests.helpers.ledger import Ledger
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.sweep import Sweeps


async def test_sweep_finds_overdue_hosts_but_not_future_or_disarmed_ones(
    ledger: Ledger, ids: str
) -> None:
    alarms = {"overdue": "-1 minute", "future": "1 hour", "disarmed": None}
    for name, interval in alarms.items():
        await ledger.admit(f"{ids}-{name}")
        await ledger.alarm_in(f"{ids}-{name}", interval)
    found = await Sweeps(ledger.pool).overdue_hosts(grace_ms=1_000, limit=10)
    assert found == [f"{ids}-overdue"]


async def test_sweep_skips_a_host_while_its_attempt_lease_is_live(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.alarm_in(ids, "-1 minute")
    assert await Sweeps(ledger.pool).overdue_hosts(grace_ms=0, limit=10) == []
    await ledger.lapse(claim.submission_id)
    assert await Sweeps(ledger.pool).overdue_hosts(grace_ms=0, limit=10) == [ids]
