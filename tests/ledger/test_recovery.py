"""Recovery dispositions on real Postgres (docs/protocol.md): what `Maintenance.recover` does to
each stalled head, and that the attempt it replaced can no longer write."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.ledger import BINDINGS, Ledger, append_settlement, now, publish
from threadwarden.errors import StaleAttempt
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.maintenance import BeginResult
from threadwarden.ledger.recovery import Recovery


def _call(*, side_effect: bool, key: str | None = None) -> dict[str, Any]:
    return {
        "tool": "charge",
        "args": {"cents": 5},
        "side_effect": side_effect,
        "idempotency_key": key,
    }


async def _charged_and_lapsed(ledger: Ledger, claim: Claim) -> BeginResult:
    """The attempt journals an unsafe tool call (no key, no result) and dies; a new pass
    begins over its lapsed lease."""
    await ledger.attempts.append(claim, "tool-call", _call(side_effect=True), step=1)
    await ledger.lapse(claim.submission_id)
    return await ledger.begin(claim.host_id)


async def _late_append_is_refused(ledger: Ledger, claim: Claim) -> None:
    before = await ledger.records(claim.submission_id)
    with pytest.raises(StaleAttempt):
        await ledger.attempts.append(claim, "message", {"text": "zombie"}, step=99)
    assert await ledger.records(claim.submission_id) == before


# --- lapsed attempts ------------------------------------------------------------------------


async def test_recover_lapsed_head_without_unsafe_effect_is_reclaimed_at_a_higher_epoch(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    old, submission = claim, claim.submission_id
    await ledger.attempts.append(old, "message", {"text": "before"}, step=1)
    await ledger.lapse(submission)

    recovery = await ledger.maintenance.recover(ids, old.pass_epoch)

    assert recovery == Recovery(repaired=1)
    row = await ledger.row(submission)
    assert (row["state"], row["ownership_token"], row["lease_expires_at"]) == ("ready", None, None)
    await _late_append_is_refused(ledger, old)  # recovery already fenced the lost attempt

    new = await ledger.attempts.claim_head(ids, old.pass_epoch, ids, bindings=BINDINGS)
    assert new is not None and new.submission_id == submission
    assert new.epoch == old.epoch + 1
    assert [(r.kind, r.step, r.body) for r in new.journal] == [("message", 1, {"text": "before"})]
    assert (await ledger.row(submission))["attempts"] == 2
    await _late_append_is_refused(ledger, old)
    await ledger.attempts.append(new, "message", {"text": "after"}, step=2)
    assert [(r["step"], r["epoch"]) for r in await ledger.records(submission)] == [
        (1, old.epoch),
        (2, new.epoch),
    ]


JOURNALS: dict[str, tuple[list[tuple[str, dict[str, Any]]], str]] = {
    "side effect, no key, no result": ([("tool-call", _call(side_effect=True))], "unknown"),
    "side effect with an idempotency key": (
        [("tool-call", _call(side_effect=True, key="charge-1"))],
        "ready",
    ),
    "side effect with its result": (
        [("tool-call", _call(side_effect=True)), ("tool-result", {"tool": "charge", "result": 1})],
        "ready",
    ),
    "side effect an operator resolved": (
        [
            ("tool-call", _call(side_effect=True)),
            ("tool-resolution", {"tool": "charge", "outcome": "not-run"}),
        ],
        "ready",
    ),
    "no side effect": ([("tool-call", _call(side_effect=False))], "ready"),
    "nothing journaled": ([], "ready"),
}


@pytest.mark.parametrize("journal", JOURNALS)
async def test_recover_classifies_a_lapsed_head_by_its_journal(
    journal: str, ledger: Ledger, claim: Claim, ids: str
) -> None:
    steps, expected = JOURNALS[journal]
    submission = claim.submission_id
    for kind, body in steps:
        await ledger.attempts.append(claim, kind, body, step=1)
    await ledger.lapse(submission)

    recovery = await ledger.maintenance.recover(ids, claim.pass_epoch)

    assert recovery == (Recovery(unknown=1) if expected == "unknown" else Recovery(repaired=1))
    row = await ledger.row(submission)
    assert (row["state"], row["ownership_token"]) == (expected, None)
    assert len(await ledger.records(submission)) == len(steps)  # recovery appends nothing
    await _late_append_is_refused(ledger, claim)


async def test_recover_unknown_head_is_a_stable_wait_never_claimed(
    ledger: Ledger, ids: str
) -> None:
    submission = await ledger.admit(ids)
    follower = await ledger.admit(ids)
    begun = await _charged_and_lapsed(ledger, await ledger.claim(ids))

    assert await ledger.maintenance.recover(ids, begun.epoch) == Recovery(unknown=1)
    assert await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS) is None
    assert (await ledger.maintenance.select_lane(ids, begun.epoch, now())).thread_id is None
    await publish(ledger.pool, ids)  # the finish activity drains the outbox first
    report = await ledger.finish(ids, begun, jitter=0.5)

    # Acknowledged and quiet: only a person can move the head, its follower stays dormant.
    host = await ledger.host(ids)
    assert (host["processed"], host["alarm_at"], host["retry"]) == (host["dirty"], None, None)
    assert report.alarm_at is None and report.nonterminal == 2
    assert (await ledger.row(submission))["state"] == "unknown"
    assert (await ledger.row(follower))["state"] == "ready"
    # A later pass finds nothing stalled: the unknown head is never replayed automatically.
    again = await ledger.begin(ids)
    assert await ledger.maintenance.recover(ids, again.epoch) == Recovery()
    assert await ledger.attempts.claim_head(ids, again.epoch, ids, bindings=BINDINGS) is None


async def test_recover_idempotent_side_effect_is_claimed_again_with_its_call(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    old = claim
    call = _call(side_effect=True, key="charge-1")
    await ledger.attempts.append(old, "tool-call", call, step=1)
    await ledger.lapse(old.submission_id)
    begun = await ledger.begin(ids)

    assert await ledger.maintenance.recover(ids, begun.epoch) == Recovery(repaired=1)
    new = await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS)

    assert new is not None and new.epoch == old.epoch + 1
    assert [(r.kind, r.body) for r in new.journal] == [("tool-call", call)]


async def test_recover_lapsed_head_asked_to_abort_settles_aborted_once(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    submission = claim.submission_id
    await ledger.attempts.append(claim, "message", {"text": "before"}, step=1)
    await ledger.operator.abort(submission)
    await ledger.lapse(submission)

    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery(repaired=1)

    row = await ledger.row(submission)
    assert (row["state"], row["outcome"]) == ("settled", "aborted")
    settlements = await ledger.settlements(submission)
    assert [s["body"]["outcome"] for s in settlements] == ["aborted"]
    assert settlements[0]["epoch"] > claim.epoch  # recovery fenced the thread first
    await _late_append_is_refused(ledger, claim)
    with pytest.raises(StaleAttempt):
        await ledger.attempts.settle(claim, "completed")
    assert len(await ledger.settlements(submission)) == 1


async def test_recover_side_effect_in_flight_stays_unknown_though_asked_to_abort(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    submission = claim.submission_id
    await ledger.attempts.append(claim, "tool-call", _call(side_effect=True), step=1)
    await ledger.operator.abort(submission)  # e.g. a second message with if_busy=interrupt
    await ledger.lapse(submission)
    begun = await ledger.begin(ids)

    assert await ledger.maintenance.recover(ids, begun.epoch) == Recovery(unknown=1)
    row = await ledger.row(submission)
    assert (row["state"], row["abort_requested"]) == ("unknown", True)  # a person decides
    assert await ledger.settlements(submission) == []

    resolved = await ledger.operator.resolve(submission, "not-run", None)
    assert resolved.state == "input-applied"
    again = await ledger.claim(ids)
    assert again.abort_requested  # the attempt after the resolution aborts


@pytest.mark.parametrize("abort_requested", [False, True])
async def test_recover_live_lease_is_deferred_and_changes_nothing(
    abort_requested: bool, ledger: Ledger, claim: Claim, ids: str
) -> None:
    await ledger.attempts.append(claim, "tool-call", _call(side_effect=True), step=1)
    if abort_requested:
        await ledger.operator.abort(claim.submission_id)
    before = await ledger.snapshot(ids)

    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery(deferred=1)

    assert await ledger.snapshot(ids) == before
    assert await ledger.attempts.renew_lease(claim)  # the live attempt still owns the head


# --- staged settlement ----------------------------------------------------------------------

RESERVATIONS = {
    "completed": ({"answer": 42}, None),
    "failed": (None, "the tool broke"),
}


@pytest.mark.parametrize("lapsed", [True, False], ids=["lapsed", "live"])
@pytest.mark.parametrize("outcome", RESERVATIONS)
async def test_recover_finishes_a_reserved_settlement_from_the_reservation(
    outcome: Any, lapsed: bool, ledger: Ledger, claim: Claim, ids: str
) -> None:
    result, reason = RESERVATIONS[outcome]
    submission = claim.submission_id
    await ledger.attempts.append(claim, "message", {"text": "done"}, step=1)
    await ledger.attempts.reserve(claim, outcome, result=result, reason=reason)
    if lapsed:
        await ledger.lapse(submission)

    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery(repaired=1)

    settlements = await ledger.settlements(submission)
    assert [s["body"] for s in settlements] == [
        {"outcome": outcome, "result": result, "reason": reason}
    ]
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"], row["reason"]) == ("settled", outcome, reason)
    assert (row["reserved_outcome"], row["ownership_token"]) == (None, None)
    # The attempt that reserved it (alive or not) cannot record a second settlement.
    with pytest.raises(StaleAttempt):
        await ledger.attempts.complete_settlement(claim)
    assert len(await ledger.settlements(submission)) == 1
    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery()


async def test_recover_finalizes_an_appended_settlement_without_a_second_record(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    submission = claim.submission_id
    await ledger.attempts.reserve(claim, "completed", result={"answer": 42})
    # Step 2 committed, step 3 (finalize) lost: the canonical record exists, the row lags.
    await append_settlement(ledger, ids, submission, claim.epoch)
    await ledger.lapse(submission)
    recorded = await ledger.settlements(submission)

    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery(repaired=1)

    assert await ledger.settlements(submission) == recorded
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"], row["reserved_outcome"]) == (
        "settled",
        "completed",
        None,
    )


async def test_recover_reports_each_stalled_row_of_the_host(ledger: Ledger, ids: str) -> None:
    threads = {name: f"{ids}-{name}" for name in ("live", "lost", "charged", "reserved")}
    heads = {name: await ledger.admit(ids, thread) for name, thread in threads.items()}
    begun = await ledger.begin(ids)
    claims: dict[str, Claim] = {}
    for name, thread in threads.items():
        claim = await ledger.attempts.claim_head(ids, begun.epoch, thread, bindings=BINDINGS)
        assert claim is not None
        claims[name] = claim
    await ledger.attempts.append(claims["charged"], "tool-call", _call(side_effect=True), step=1)
    await ledger.attempts.reserve(claims["reserved"], "completed")
    for name in ("lost", "charged"):
        await ledger.lapse(heads[name])

    recovery = await ledger.maintenance.recover(ids, begun.epoch)

    assert recovery == Recovery(repaired=2, deferred=1, unknown=1)
    states = {name: (await ledger.row(s))["state"] for name, s in heads.items()}
    assert states == {
        "live": "running",
        "lost": "ready",
        "charged": "unknown",
        "reserved": "settled",
    }


async def test_interrupt_leaves_an_unknown_side_effect_to_a_person_then_aborts(
    ledger: Ledger, claim: Claim, ids: str
) -> None:
    submission = claim.submission_id
    begun = await _charged_and_lapsed(ledger, claim)
    assert await ledger.maintenance.recover(ids, begun.epoch) == Recovery(unknown=1)

    receipt = await ledger.admissions.admit(
        thread_id=ids, agent_id="echo", input={"n": 2}, host_id=ids, if_busy="interrupt"
    )

    assert receipt.interrupted == [submission]
    row = await ledger.row(submission)
    assert (row["state"], row["abort_requested"]) == ("unknown", True)  # still in the inbox
    assert row["interrupted_by"] == receipt.submission_id
    assert await ledger.settlements(submission) == []
    await ledger.operator.resolve(submission, "ran", {"charged": 5})
    again = await ledger.claim(ids)
    assert (again.submission_id, again.abort_requested) == (submission, True)
