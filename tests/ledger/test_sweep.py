"""The sweeper's query: overdue alarms, except hosts with a live attempt lease."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.sweep import Sweeps
from threadwarden.protocol.decisions import Timing


async def _make_overdue(pool: asyncpg.Pool[Any], host_id: str) -> None:
    await pool.execute(
        "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() - interval '1 minute'"
        " WHERE host_id = $1",
        host_id,
    )


async def test_sweep_finds_overdue_hosts_but_not_future_or_disarmed_ones(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    for name in ("overdue", "future", "disarmed"):
        await admissions.admit(thread_id=f"{ids}-{name}", agent_id="echo", input={})
    await _make_overdue(pool, f"{ids}-overdue")
    await pool.execute(
        "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() + interval '1 hour'"
        " WHERE host_id = $1",
        f"{ids}-future",
    )
    await pool.execute(
        "UPDATE threadwarden.hosts SET alarm_at = NULL WHERE host_id = $1", f"{ids}-disarmed"
    )
    found = await Sweeps(pool).overdue_hosts(grace_ms=1_000, limit=10)
    assert found == [f"{ids}-overdue"]


async def test_sweep_skips_a_host_while_its_attempt_lease_is_live(
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
    await _make_overdue(pool, host)
    assert await Sweeps(pool).overdue_hosts(grace_ms=0, limit=10) == []
    await pool.execute(
        "UPDATE threadwarden.submissions SET lease_expires_at = clock_timestamp()"
        " - interval '1 second' WHERE submission_id = $1",
        claim.submission_id,
    )
    assert await Sweeps(pool).overdue_hosts(grace_ms=0, limit=10) == [host]
