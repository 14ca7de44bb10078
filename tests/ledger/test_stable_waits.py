"""Stable waits: a waiting head lets the alarm go quiet; its ready followers stay dormant."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.helpers.ledger import Ledger

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_scenario_23_ready_followers_behind_a_stable_waiting_head_are_not_autonomous(
    ledger: Ledger, ids: str
) -> None:
    # Two threads on one host: on "waiting" the head is suspended (an approval wait, set by SQL
    # until the agent runtime creates it) with a ready follower; "other" is empty of work.
    head = await ledger.admit(ids, f"{ids}-waiting")
    await ledger.admit(ids, f"{ids}-waiting")
    await ledger.suspend(head)
    begun = await ledger.maintenance.begin(ids, NOW)
    assert not begun.caught_up
    assert (await ledger.maintenance.select_lane(ids, begun.epoch, NOW)).thread_id is None
    report = await ledger.finish(ids, begun, jitter=0.5, at=NOW)
    host = await ledger.host(ids)
    # Acknowledged and quiet: nothing autonomous remains, so no retry and no alarm.
    assert (host["processed"], host["dirty"]) == (begun.generation, begun.generation)
    assert host["alarm_at"] is None and host["retry"] is None
    assert report.nonterminal == 2 and report.alarm_at is None
