"""Stable waits: a waiting head lets the alarm go quiet; its ready followers stay dormant."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.protocol.decisions import Timing

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_scenario_23_ready_followers_behind_a_stable_waiting_head_are_not_autonomous(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    # Two threads on one host: on "waiting" the head is suspended (an approval wait, set by SQL
    # until the agent runtime creates it) with a ready follower; "other" is empty of work.
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    head = await admissions.admit(thread_id=f"{ids}-waiting", agent_id="a", input={}, host_id=ids)
    await admissions.admit(thread_id=f"{ids}-waiting", agent_id="a", input={}, host_id=ids)
    await pool.execute(
        "UPDATE threadwarden.submissions SET state = 'suspended' WHERE submission_id = $1",
        head.submission_id,
    )
    maintenance = Maintenance(pool, Timing())
    begun = await maintenance.begin(ids, NOW)
    assert not begun.caught_up
    assert (await maintenance.select_lane(ids, begun.epoch, NOW)).thread_id is None
    report = await maintenance.finish(
        ids,
        begun.epoch,
        generation=begun.generation,
        stalls=0,
        progressed=False,
        now=NOW,
        jitter=0.5,
    )
    host = await pool.fetchrow("SELECT * FROM threadwarden.hosts WHERE host_id = $1", ids)
    assert host is not None
    # Acknowledged and quiet: nothing autonomous remains, so no retry and no alarm.
    assert (host["processed"], host["dirty"]) == (begun.generation, begun.generation)
    assert host["alarm_at"] is None and host["retry"] is None
    assert report.nonterminal == 2 and report.alarm_at is None
