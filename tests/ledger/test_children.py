"""Subagent children at the ledger level (docs/protocol.md "Subagent children", scenarios 1, 2, 5,
6, 7): one transaction establishes a child with its linkage, lineage and the parent's start link;
the parent's wait, the child-settled marker and the join, against real Postgres."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import asyncpg
import pytest

from tests.helpers.children import Family, crashing_connection
from tests.helpers.ledger import BINDINGS, now
from threadwarden.errors import (
    AbortRequested,
    ChildConflict,
    ChildNotSettled,
    IdempotencyConflict,
    InvalidInput,
    StaleAttempt,
    StalePass,
)
from threadwarden.ledger.child_establishment import child_key_for, child_thread_id_for
from threadwarden.ledger.pool import Connection

NEW_CHILD_STATEMENTS = 8
"""owner, lock hosts, fence, resolve, admission (one statement), linkage, lineage, start link."""


async def test_children_scenario_01_clean_run_one_receipt_one_join(family: Family) -> None:
    parent = await family.parent()
    parent_host_before = await family.ledger.host(family.parent_host)

    child = await family.establish(parent, 1, input={"q": "research"})

    # One child, linked, on its derived thread and key, admitted ready on its own host.
    assert child.created and child.wake
    assert child.thread_id == child_thread_id_for(parent.submission_id, 1) == child.host_id
    assert child.idempotency_key == child_key_for(parent.submission_id, 1)
    (row,) = await family.children_of(parent.submission_id)
    assert row["submission_id"] == child.submission_id
    assert (row["parent_call_step"], row["state"], row["idempotency_key"]) == (
        1,
        "ready",
        child.idempotency_key,
    )
    # The lineage is the child thread's first record, before any turn.
    (lineage,) = await family.thread_records(child.thread_id)
    assert (lineage["kind"], lineage["submission_id"]) == ("lineage", child.submission_id)
    assert lineage["body"]["parent_submission_id"] == parent.submission_id
    assert (lineage["body"]["parent_call_step"], lineage["body"]["depth"]) == (1, 1)
    # The parent's start link at the call's journal step.
    started = [r for r in await family.ledger.records(parent.submission_id)]
    assert [(r["kind"], r["step"]) for r in started] == [("call-started", 1)]
    assert started[0]["body"]["child_submission_id"] == child.submission_id
    # The mutation gate bumped and armed the child's host, not the parent's.
    child_host = await family.ledger.host(child.host_id)
    assert (child_host["dirty"], child_host["nonterminal"]) == (2, 1)
    assert child_host["alarm_at"] is not None
    assert (await family.ledger.host(family.parent_host))["dirty"] == parent_host_before["dirty"]

    wait = await family.children.suspend_for_children(parent, [child.submission_id])
    assert (wait.suspended, wait.waiting, wait.settled) == (True, [child.submission_id], [])
    assert (await family.ledger.row(parent.submission_id))["state"] == "suspended"
    with pytest.raises(StaleAttempt):  # the suspend ended the attempt's ownership
        await family.establish(parent, 2)

    dirty = (await family.ledger.host(family.parent_host))["dirty"]
    # The child's settlement records the marker on the parent's host, in its transaction.
    settled = await family.settle_child(child, result={"answer": 42})
    assert (settled.status, settled.recorded) == ("woken", True)
    assert settled.parent_host_id == family.parent_host
    assert (await family.ledger.row(parent.submission_id))["state"] == "input-applied"
    woken_host = await family.ledger.host(family.parent_host)
    assert woken_host["dirty"] == dirty + 1 and woken_host["alarm_at"] is not None
    assert await family.markers(parent.submission_id) == [
        {
            "child_submission_id": child.submission_id,
            "parent_host_id": family.parent_host,
            "outcome": "completed",
        }
    ]

    resumed = await family.reclaim()
    joined = await family.children.join(resumed, 1)
    again = await family.children.join(resumed, 1)
    assert (joined.outcome, joined.result, joined.submission_id) == (
        "completed",
        {"answer": 42},
        child.submission_id,
    )
    assert again == joined
    kinds = [(r["kind"], r["step"]) for r in await family.ledger.records(parent.submission_id)]
    assert kinds == [("call-started", 1), ("children-awaited", None), ("call-joined", 1)]
    (record,) = [r for r in await family.ledger.records(parent.submission_id) if r["step"] == 1][1:]
    assert record["body"]["settlement_record_id"] == joined.settlement_record_id


async def test_children_establishment_repeat_returns_the_same_receipt_and_writes_nothing(
    family: Family,
) -> None:
    parent = await family.parent()
    first = await family.establish(parent, 1)
    before = (
        await family.ledger.snapshot(first.host_id),
        await family.ledger.snapshot(family.parent_host),
    )

    again = await family.establish(parent, 1)

    assert not again.created and not again.wake
    assert again.model_dump(exclude={"created"}) == first.model_dump(exclude={"created"})
    after = (
        await family.ledger.snapshot(first.host_id),
        await family.ledger.snapshot(family.parent_host),
    )
    assert after == before


@pytest.mark.parametrize("crash_at", range(NEW_CHILD_STATEMENTS))
async def test_children_scenario_02_crash_at_each_establishment_step_leaves_one_child(
    family: Family, pool: asyncpg.Pool[Any], database_url: str, crash_at: int
) -> None:
    parent = await family.parent()
    async with crashing_connection(database_url, pool, crash_at) as crashing:
        with pytest.raises(Exception):  # noqa: B017 - the crash, or the dead connection's
            async with crashing.transaction():
                await family.children.establish_child_in(
                    cast(Connection, crashing), parent, step=1, agent_id="echo", input={"n": 1}
                )
    assert len(crashing.statements) == crash_at  # it died right before that statement
    assert await family.children_of(parent.submission_id) == []  # nothing survived the crash
    assert [r["kind"] for r in await family.ledger.records(parent.submission_id)] == []

    # The attempt died with it: its lease lapses, recovery returns it, the re-run establishes.
    recovery, rerun = await family.rerun(parent)
    assert recovery.repaired == 1
    child = await family.establish(rerun, 1, input={"n": 1})

    assert child.created
    (row,) = await family.children_of(parent.submission_id)
    assert row["submission_id"] == child.submission_id
    kinds = [r["kind"] for r in await family.thread_records(child.thread_id)]
    assert kinds == ["lineage"]


async def test_children_scenario_02_crash_after_establishment_commit_rerun_finds_the_child(
    family: Family, pool: asyncpg.Pool[Any], database_url: str
) -> None:
    parent = await family.parent()
    async with crashing_connection(database_url, pool, None) as counted, counted.transaction():
        child = await family.children.establish_child_in(
            cast(Connection, counted), parent, step=1, agent_id="echo", input={"n": 1}
        )
    assert len(counted.statements) == NEW_CHILD_STATEMENTS
    # The worker dies before the parent suspends; recovery returns it and the re-run goes on.
    _, rerun = await family.rerun(parent)
    assert rerun.epoch > parent.epoch
    assert [(r.kind, r.step) for r in rerun.journal] == [("call-started", 1)]

    again = await family.establish(rerun, 1, input={"n": 1})
    wait = await family.children.suspend_for_children(rerun, [again.submission_id])

    assert (again.submission_id, again.created) == (child.submission_id, False)
    assert len(await family.children_of(parent.submission_id)) == 1
    assert wait.suspended
    # The dead attempt's claim writes nothing any more (a newer pass began).
    with pytest.raises(StalePass):
        await family.establish(parent, 2)
    assert len(await family.children_of(parent.submission_id)) == 1


async def test_children_scenario_05_a_diverging_request_fails_closed(family: Family) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1, input={"q": "a"})
    before = (
        await family.ledger.snapshot(child.host_id),
        await family.ledger.snapshot(family.parent_host),
    )

    with pytest.raises(ChildConflict, match="payload"):
        await family.establish(parent, 1, input={"q": "b"})
    with pytest.raises(ChildConflict, match="payload"):
        await family.establish(parent, 1, input={"q": "a"}, agent_id="other")
    with pytest.raises(ChildConflict, match="thread_id"):  # one child per call, any thread
        await family.establish(parent, 1, input={"q": "a"}, thread_id=f"{child.thread_id}-x")

    assert len(await family.children_of(parent.submission_id)) == 1
    after = (
        await family.ledger.snapshot(child.host_id),
        await family.ledger.snapshot(family.parent_host),
    )
    assert after == before
    missing = await family.ledger.pool.fetchval(
        "SELECT count(*) FROM threadwarden.threads WHERE thread_id = $1", f"{child.thread_id}-x"
    )
    assert missing == 0


async def test_children_a_foreign_submission_holding_the_key_fails_closed(
    family: Family,
) -> None:
    parent = await family.parent()
    thread = child_thread_id_for(parent.submission_id, 1)
    key = child_key_for(parent.submission_id, 1)
    await family.ledger.admissions.admit(
        thread_id=thread, agent_id="echo", input={"n": 1}, idempotency_key=key
    )

    with pytest.raises(ChildConflict, match="not the child"):
        await family.establish(parent, 1, input={"n": 1})
    with pytest.raises(IdempotencyConflict):
        await family.establish(parent, 1, input={"n": 2})

    assert await family.children_of(parent.submission_id) == []
    assert await family.ledger.records(parent.submission_id) == []


async def test_children_scenario_06_two_children_still_waiting_then_woken_then_replay(
    family: Family,
) -> None:
    parent, (first, second), wait = await family.waiting_parent(2)
    assert wait.suspended and wait.waiting == [first.submission_id, second.submission_id]

    one = await family.settle_child(first)
    assert (one.status, one.recorded) == ("still-waiting", True)
    assert (await family.ledger.row(parent.submission_id))["state"] == "suspended"

    two = await family.settle_child(second, "failed")
    assert (two.status, two.recorded) == ("woken", True)
    assert (await family.ledger.row(parent.submission_id))["state"] == "input-applied"

    before = await family.ledger.snapshot(family.parent_host)
    markers = await family.markers(parent.submission_id)
    for child in (first, second):
        replay = await family.children.record_child_settled(child.submission_id)
        assert (replay.status, replay.recorded) == ("not-waiting", False)
    assert await family.ledger.snapshot(family.parent_host) == before
    assert await family.markers(parent.submission_id) == markers
    assert sorted(m["outcome"] for m in markers) == ["completed", "failed"]

    resumed = await family.reclaim()
    outcomes = [(await family.children.join(resumed, step)).outcome for step in (1, 2)]
    assert outcomes == ["completed", "failed"]


async def test_children_scenario_07_settled_before_suspend_resumes_under_the_same_claim(
    family: Family,
) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1)
    dirty = (await family.ledger.host(family.parent_host))["dirty"]
    early = await family.settle_child(child, result="done")
    assert (early.status, early.recorded) == ("not-waiting", True)
    assert (await family.ledger.host(family.parent_host))["dirty"] == dirty + 1

    wait = await family.children.suspend_for_children(parent, [child.submission_id])
    assert (wait.suspended, wait.settled, wait.waiting) == (False, [child.submission_id], [])
    row = await family.ledger.row(parent.submission_id)
    assert (row["state"], row["ownership_token"]) == ("running", parent.ownership_token)

    joined = await family.children.join(parent, 1)  # the same claim joins at once
    assert (joined.outcome, joined.result) == ("completed", "done")
    kinds = [r["kind"] for r in await family.ledger.records(parent.submission_id)]
    assert kinds == ["call-started", "call-joined"]


async def test_children_join_and_marker_refuse_an_unsettled_child(family: Family) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1)

    with pytest.raises(ChildNotSettled):
        await family.children.record_child_settled(child.submission_id)
    with pytest.raises(ChildNotSettled):
        await family.children.join(parent, 1)
    with pytest.raises(InvalidInput, match="children"):
        await family.children.suspend_for_children(parent, [parent.submission_id])

    assert await family.markers(parent.submission_id) == []
    assert [r["kind"] for r in await family.ledger.records(parent.submission_id)] == [
        "call-started"
    ]


async def test_children_a_child_on_the_parents_own_thread_is_refused(family: Family) -> None:
    parent = await family.parent()
    with pytest.raises(InvalidInput, match="thread_id"):
        await family.establish(parent, 1, thread_id=parent.thread_id)
    assert await family.children_of(parent.submission_id) == []


async def test_children_a_grandchild_on_an_ancestors_thread_is_refused(family: Family) -> None:
    """Queued behind the grandparent that waits for it, it would never run."""
    parent = await family.parent()
    child = await family.establish(parent, 1)
    begun = await family.ledger.begin(child.host_id)
    child_claim = await family.ledger.attempts.claim_head(
        child.host_id, begun.epoch, child.thread_id, bindings=BINDINGS
    )
    assert child_claim is not None and child_claim.parent_submission_id == parent.submission_id
    with pytest.raises(InvalidInput, match="ancestors"):
        await family.children.establish_child(
            child_claim, step=1, agent_id="echo", input={}, thread_id=parent.thread_id
        )
    assert await family.children_of(child.submission_id) == []
    grandchild = await family.children.establish_child(
        child_claim, step=1, agent_id="echo", input={}
    )
    assert grandchild.created and grandchild.parent_submission_id == child.submission_id
    lineage = [r for r in await family.thread_records(grandchild.thread_id)]
    assert lineage[0]["kind"] == "lineage" and lineage[0]["body"]["depth"] == 2


async def test_children_the_linkage_is_immutable(family: Family) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1)

    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await family.ledger.pool.execute(
            "UPDATE threadwarden.submissions SET parent_call_step = 2 WHERE submission_id = $1",
            child.submission_id,
        )
    assert (await family.ledger.row(child.submission_id))["parent_call_step"] == 1
    begun = await family.ledger.maintenance.begin(child.host_id, now())
    assert not begun.caught_up  # the child's host has work: the establishment made it dirty


async def _waiting_on_locks(pool: asyncpg.Pool[Any], count: int) -> None:
    """Poll (with a deadline) until ``count`` backends of this database wait for a lock."""
    async with asyncio.timeout(10):
        while (
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            < count
        ):
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("first", ["marker", "suspend"])
async def test_children_scenario_07_settle_racing_the_suspend_never_strands_the_parent(
    family: Family, pool: asyncpg.Pool[Any], first: str
) -> None:
    """The child's settlement (with its marker) and the suspend queue on the parent's host row
    in a known order; either way the parent ends up resumed or woken, never suspended on a
    settled child."""
    parent = await family.parent()
    child = await family.establish(parent, 1)

    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", family.parent_host
        )
        marker = suspend = None
        for which in (first, "suspend" if first == "marker" else "marker"):
            if which == "marker":
                marker = asyncio.create_task(family.settle_child(child))
            else:
                suspend = asyncio.create_task(
                    family.children.suspend_for_children(parent, [child.submission_id])
                )
            await _waiting_on_locks(pool, 1 if which == first else 2)
    assert marker is not None and suspend is not None
    settled, wait = await marker, await suspend

    state = (await family.ledger.row(parent.submission_id))["state"]
    if first == "marker":  # the suspend saw the marker: resume at once, same claim
        assert (settled.status, wait.suspended, state) == ("not-waiting", False, "running")
    else:  # the marker saw the suspended parent: woken
        assert (settled.status, wait.suspended, state) == ("woken", True, "input-applied")
    assert settled.recorded
    assert len(await family.markers(parent.submission_id)) == 1


async def test_children_a_repeat_and_a_marker_replay_cost_four_and_one_statements(
    family: Family, pool: asyncpg.Pool[Any], database_url: str
) -> None:
    parent = await family.parent()
    child = await family.establish(parent, 1)
    await family.settle_child(child)  # it records the marker
    async with crashing_connection(database_url, pool, None) as counted:
        async with counted.transaction():
            again = await family.children.establish_child_in(
                cast(Connection, counted), parent, step=1, agent_id="echo", input={"task": 1}
            )
        repeat = counted.statements.copy()
        counted.statements.clear()
        async with counted.transaction():
            settled = await family.children.record_child_settled_in(
                cast(Connection, counted), child.submission_id
            )
        replay = counted.statements

    assert not again.created and again.submission_id == child.submission_id
    assert len(repeat) == 4, repeat  # owner, lock, fence, resolve
    assert (settled.status, settled.recorded) == ("not-waiting", False)
    assert len(replay) == 1, replay  # the read: no lock, no write


async def test_children_an_abort_requested_parent_establishes_nothing(family: Family) -> None:
    parent = await family.parent()
    await family.ledger.operator.abort(parent.submission_id)  # honoured at the next boundary

    with pytest.raises(AbortRequested):
        await family.establish(parent, 1)

    assert await family.children_of(parent.submission_id) == []
    assert await family.ledger.records(parent.submission_id) == []


async def test_children_crossing_establishments_between_two_hosts_do_not_deadlock(
    family: Family, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """A parent on host A delegates to host B while a parent on B delegates to A: both lock
    the two host rows in byte order, so neither waits for the other's (a deadlock otherwise:
    each would hold its own host for its fence and want the other's for the admission)."""
    a_host, b_host = family.parent_host, f"{ids}-q"
    a = await family.parent()
    await family.ledger.admit(b_host)
    b = await family.ledger.claim(b_host)

    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT 1 FROM threadwarden.hosts WHERE host_id = ANY($1::text[]) FOR UPDATE",
            [a_host, b_host],
        )
        to_b = asyncio.create_task(family.establish(a, 1, thread_id=f"{ids}-cb", host_id=b_host))
        to_a = asyncio.create_task(family.establish(b, 1, thread_id=f"{ids}-ca", host_id=a_host))
        await _waiting_on_locks(pool, 2)
    child_b, child_a = await to_b, await to_a

    assert (child_b.host_id, child_a.host_id) == (b_host, a_host)
    assert child_b.created and child_a.created


async def test_children_recovery_settling_a_child_takes_its_parents_host_first(
    family: Family, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """Recovery settles a lapsed child asked to abort, which records its marker on the
    parent's host. With the parent's host sorting first and held elsewhere, recovery waits for
    it *before* taking its own host (byte order, like establishment): the child's host stays
    free meanwhile, so a crossing establishment could never close a lock cycle with it."""
    child_host = f"{ids}-z"  # the parent's host, "{ids}-p", sorts first
    parent = await family.parent()
    child = await family.establish(parent, 1, host_id=child_host)
    child_claim = await family.ledger.claim(child_host, child.thread_id)
    assert (await family.ledger.operator.abort(child.submission_id)).state == "running"
    await family.ledger.lapse(child_claim.submission_id)
    begun = await family.ledger.begin(child_host)

    async with pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", family.parent_host
        )
        recovering = asyncio.create_task(family.ledger.maintenance.recover(child_host, begun.epoch))
        await _waiting_on_locks(pool, 1)
        async with pool.acquire() as other, other.transaction():
            free = await other.fetchval(
                "SELECT host_id FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE NOWAIT",
                child_host,
            )
        assert free == child_host
    recovery = await recovering

    assert (recovery.repaired, recovery.parent_hosts) == (1, [family.parent_host])
    row = await family.ledger.row(child.submission_id)
    assert (row["state"], row["outcome"]) == ("settled", "aborted")
    assert [m["outcome"] for m in await family.markers(parent.submission_id)] == ["aborted"]
