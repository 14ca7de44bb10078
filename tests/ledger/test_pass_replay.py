"""A pass whose steps run again at the same epoch (issue 28): a host run that lost the markers
of a long head re-runs its steps with the epoch begin recorded, so every per-pass write must
mean the same the second time.

- The claim names the submission the pass selected: a re-run after that head settled claims
  nothing (the next head was never selected, nor its publication gate checked).
- The failure rearm and the binding-retry record count once per pass.
- The claim's one statement reads from a snapshot taken before its lock wait: what committed
  during the wait (a late journal record, an abort request) is still seen.
- So does begin's: a head admitted during its wait on the host row is selected, not missed
  (an idle pass that counted a stall and backed off, ~100 ms, on the 600-turn thread).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tests.helpers.polling import eventually
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.records import insert_record

BINDINGS = {"echo": "digest-1"}


async def _selected(maintenance: Maintenance, host_id: str) -> tuple[int, str, str]:
    """Begin and select: the pass's epoch, thread and head."""
    now = datetime.now(UTC)
    begun = await maintenance.begin(host_id, now)
    selection = await maintenance.select_lane(host_id, begun.epoch, now, begun.view)
    assert selection.thread_id is not None and selection.submission_id is not None
    return begun.epoch, selection.thread_id, selection.submission_id


async def _row(pool: asyncpg.Pool[Any], submission_id: str) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT state, attempts, epoch FROM threadwarden.submissions WHERE submission_id = $1",
        submission_id,
    )
    assert row is not None
    return dict(row)


async def test_a_claim_replayed_after_its_head_settled_claims_no_other_head(
    maintenance: Maintenance, attempts: Attempts, admissions: Admissions, pool: Any, ids: str
) -> None:
    first = await admissions.admit(thread_id=ids, agent_id="echo", input={"n": 1})
    second = await admissions.admit(thread_id=ids, agent_id="echo", input={"n": 2})
    epoch, thread, planned = await _selected(maintenance, ids)
    assert planned == first.submission_id

    claim = await attempts.claim_head(ids, epoch, thread, bindings=BINDINGS, submission_id=planned)
    assert claim is not None and claim.submission_id == planned
    await attempts.settle(claim, "completed", result={"n": 1})
    follower = await _row(pool, second.submission_id)
    assert (follower["attempts"], follower["epoch"]) == (0, 0)

    # The same step again, at the same epoch, as a replay that lost its marker runs it.
    again = await attempts.claim_head(ids, epoch, thread, bindings=BINDINGS, submission_id=planned)
    assert again is None
    assert await _row(pool, second.submission_id) == follower  # not claimed, not touched


async def test_a_rearm_run_twice_in_one_pass_counts_one_stall(
    maintenance: Maintenance, admissions: Admissions, pool: Any, ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    now = datetime.now(UTC)
    begun = await maintenance.begin(ids, now)

    async def rearm(jitter: float) -> dict[str, Any]:
        await maintenance.rearm_failure(
            ids,
            begun.epoch,
            generation=begun.generation,
            native_only=True,
            now=now,
            jitter=jitter,
            error="the attempt failed",
        )
        row = await pool.fetchrow(
            "SELECT retry, alarm_at FROM threadwarden.hosts WHERE host_id = $1", ids
        )
        return dict(row)

    once = await rearm(0.5)
    twice = await rearm(0.99)  # a different jitter: a recount would move not_before
    assert once["retry"]["stalls"] == 1
    assert twice == once


async def test_a_binding_failure_recorded_twice_in_one_pass_counts_once(
    maintenance: Maintenance, admissions: Admissions, pool: Any, ids: str
) -> None:
    head = await admissions.admit(thread_id=ids, agent_id="missing", input={})
    epoch, thread, _ = await _selected(maintenance, ids)

    async def record(epoch: int) -> list[dict[str, Any]]:
        await maintenance.record_binding_result(
            ids,
            epoch,
            thread_id=thread,
            submission_id=head.submission_id,
            failed=True,
            now=datetime.now(UTC),
        )
        value = await pool.fetchval(
            "SELECT binding_retries FROM threadwarden.hosts WHERE host_id = $1", ids
        )
        return list(value)

    once = await record(epoch)
    assert [entry["attempts"] for entry in once] == [1]
    assert await record(epoch) == once

    # The next pass's failure counts again.
    later = (await maintenance.begin(ids, datetime.now(UTC))).epoch
    assert [entry["attempts"] for entry in await record(later)] == [2]


async def _claim_waiting_on(
    pool: asyncpg.Pool[Any], hold: asyncpg.Connection[Any], claim: asyncio.Task[Any]
) -> None:
    """Until the claim's statement waits for a lock ``hold`` has (then its snapshot is older
    than what ``hold`` commits next)."""

    async def waiting() -> bool:
        if claim.done():
            return True  # it did not wait: the test's assertions will say so
        return bool(
            await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> $1",
                hold.get_server_pid(),
            )
        )

    await eventually(waiting, bool, what="the claim waits for the held lock")


async def test_a_claim_sees_a_journal_record_committed_during_its_lock_wait(
    maintenance: Maintenance, attempts: Attempts, admissions: Admissions, pool: Any, ids: str
) -> None:
    head = await admissions.admit(thread_id=ids, agent_id="echo", input={})
    epoch, thread, planned = await _selected(maintenance, ids)
    async with pool.acquire() as hold:
        transaction = hold.transaction()
        await transaction.start()
        # A late step of an earlier attempt (its lease lapsed; its write still commits): the
        # append takes the thread row.
        await insert_record(
            hold,
            thread_id=thread,
            submission_id=planned,
            kind="tool",
            body={"n": 1},
            epoch=0,
            step=1,
        )
        claim = asyncio.ensure_future(
            attempts.claim_head(ids, epoch, thread, bindings=BINDINGS, submission_id=planned)
        )
        await _claim_waiting_on(pool, hold, claim)
        await transaction.commit()
    taken = await claim
    assert taken is not None and taken.submission_id == head.submission_id
    assert [(r.kind, r.step) for r in taken.journal] == [("tool", 1)]


async def test_a_claim_sees_an_abort_requested_during_its_lock_wait(
    maintenance: Maintenance, attempts: Attempts, admissions: Admissions, pool: Any, ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={})
    epoch, thread, planned = await _selected(maintenance, ids)
    async with pool.acquire() as hold:
        transaction = hold.transaction()
        await transaction.start()
        # An operator's abort, in the lock order of every writer: host, thread, submission.
        await hold.execute("SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", ids)
        await hold.execute(
            "UPDATE threadwarden.submissions SET abort_requested = true WHERE submission_id = $1",
            planned,
        )
        claim = asyncio.ensure_future(
            attempts.claim_head(ids, epoch, thread, bindings=BINDINGS, submission_id=planned)
        )
        await _claim_waiting_on(pool, hold, claim)
        await transaction.commit()
    taken = await claim
    assert taken is not None and taken.abort_requested


async def test_begin_selects_a_head_admitted_during_its_lock_wait(
    maintenance: Maintenance, attempts: Attempts, admissions: Admissions, pool: Any, ids: str
) -> None:
    await admissions.admit(thread_id=ids, agent_id="echo", input={"n": 1})
    epoch, thread, planned = await _selected(maintenance, ids)
    claim = await attempts.claim_head(ids, epoch, thread, bindings=BINDINGS, submission_id=planned)
    assert claim is not None
    await attempts.settle(claim, "completed", result={"n": 1})
    async with pool.acquire() as hold:
        transaction = hold.transaction()
        await transaction.start()
        # The thread's next turn, admitted while the pass after the settling one begins: the
        # admission holds the host row (its mutation gate) until it commits.
        turn = await admissions.admit_in(
            hold, key="next", digest="next", thread_id=ids, agent_id="echo", input={"n": 2}
        )
        begun = asyncio.ensure_future(maintenance.begin(ids, datetime.now(UTC)))
        await _claim_waiting_on(pool, hold, begun)
        await transaction.commit()
    begin = await begun
    selection = await maintenance.select_lane(ids, begin.epoch, datetime.now(UTC), begin.view)
    assert selection.submission_id == turn.submission_id
