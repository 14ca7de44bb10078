"""Operator mutations at ledger level (issue 4 items 5-7): approve, deny, resolve and
abort each record their decision canonically, bump ``dirty`` and arm the alarm, or raise
`NotWaiting` and write nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from tests.helpers.ledger import BINDINGS, Ledger, append_settlement, now
from threadwarden.errors import AbortRequested, NotFound, NotWaiting, StaleAttempt, StalePass
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.recovery import Recovery

MIN_DELAY = timedelta(milliseconds=50)
CLOCK_SLACK = timedelta(milliseconds=25)
CHARGE = {"tool": "charge", "args": {"cents": 5}, "side_effect": True, "idempotency_key": None}


# --- putting a head into a state ------------------------------------------------------------


async def _ready(ledger: Ledger, ids: str) -> str:
    return await ledger.admit(ids)


async def _running(ledger: Ledger, ids: str) -> str:
    submission = await ledger.admit(ids)
    await ledger.claim(ids)
    return submission


async def _suspended(ledger: Ledger, ids: str) -> str:
    """Suspended on an approval requested at step 2 (step 1 is a message)."""
    submission = await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.append(claim, "message", {"text": "quote"}, step=1)
    await ledger.attempts.append(claim, "approval-requested", {"reason": "spend 5"}, step=2)
    await ledger.attempts.stop(claim, "suspended")
    return submission


async def _unknown(ledger: Ledger, ids: str) -> str:
    """Unknown through recovery: the worker died after preparing a side effect at step 2."""
    submission = await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.append(claim, "message", {"text": "quote"}, step=1)
    await ledger.attempts.append(claim, "tool-call", CHARGE, step=2)
    await ledger.lapse(submission)
    assert await ledger.maintenance.recover(ids, claim.pass_epoch) == Recovery(unknown=1)
    return submission


async def _input_applied(ledger: Ledger, ids: str) -> str:
    submission = await _suspended(ledger, ids)
    await ledger.operator.approve(submission)
    return submission


async def _settled(ledger: Ledger, ids: str) -> str:
    submission = await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.settle(claim, "completed")
    return submission


STATES: dict[str, Callable[[Ledger, str], Awaitable[str]]] = {
    "ready": _ready,
    "running": _running,
    "suspended": _suspended,
    "unknown": _unknown,
    "input-applied": _input_applied,
    "settled": _settled,
}


async def _decided(
    ledger: Ledger, ids: str, submission: str, action: Callable[[], Awaitable[Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """Run ``action`` on a quiet host; check it armed the alarm; return it and its new records."""
    await ledger.quiet(ids)
    host, records = await ledger.host(ids), await ledger.records(submission)
    started = now()
    result = await action()
    finished = now()
    after = await ledger.host(ids)
    assert after["dirty"] == host["dirty"] + 1
    assert after["alarm_at"] is not None
    assert started + MIN_DELAY - CLOCK_SLACK <= after["alarm_at"] <= finished + MIN_DELAY
    return result, (await ledger.records(submission))[len(records) :]


def _kinds(records: list[dict[str, Any]]) -> list[tuple[str, int | None, Any]]:
    return [(r["kind"], r["step"], r["body"]) for r in records]


# --- approvals ------------------------------------------------------------------------------


async def test_approve_records_the_decision_at_the_request_step_and_resumes(
    ledger: Ledger, ids: str
) -> None:
    submission = await _suspended(ledger, ids)
    epoch = (await ledger.row(submission))["epoch"]

    result, written = await _decided(
        ledger, ids, submission, lambda: ledger.operator.approve(submission)
    )

    assert (result.state, result.outcome, result.changed) == ("input-applied", None, True)
    assert _kinds(written) == [("approval-decision", 2, {"approved": True})]
    assert written[0]["epoch"] > epoch  # the decision fences out any earlier attempt
    assert (await ledger.row(submission))["state"] == "input-applied"
    begun = await ledger.begin(ids)
    claim = await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS)
    assert claim is not None and claim.submission_id == submission
    assert [(r.kind, r.step) for r in claim.journal] == [
        ("message", 1),
        ("approval-requested", 2),
        ("approval-decision", 2),
    ]


async def test_deny_records_the_decision_and_settles_failed_once(ledger: Ledger, ids: str) -> None:
    submission = await _suspended(ledger, ids)

    result, written = await _decided(
        ledger, ids, submission, lambda: ledger.operator.deny(submission, "too pricey")
    )

    assert (result.state, result.outcome) == ("settled", "failed")
    reason = "approval denied: too pricey"
    assert _kinds(written) == [
        ("approval-decision", 2, {"approved": False, "reason": "too pricey"}),
        ("settlement", None, {"outcome": "failed", "result": None, "reason": reason}),
    ]
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"], row["reason"]) == ("settled", "failed", reason)


# --- unknown side effects -------------------------------------------------------------------

RESOLUTIONS: dict[str, tuple[Any, list[tuple[str, int | None, Any]], tuple[str, str | None]]] = {
    "ran": (
        {"charged": 5},
        [
            (
                "tool-result",
                2,
                {"tool": "charge", "result": {"charged": 5}, "resolved_by": "operator"},
            )
        ],
        ("input-applied", None),
    ),
    "not-run": (
        None,
        [("tool-resolution", 2, {"tool": "charge", "outcome": "not-run"})],
        ("input-applied", None),
    ),
    "fail": (
        None,
        [
            ("tool-resolution", 2, {"tool": "charge", "outcome": "fail"}),
            (
                "settlement",
                None,
                {
                    "outcome": "failed",
                    "result": None,
                    "reason": "operator failed unresolved tool call charge",
                },
            ),
        ],
        ("settled", "failed"),
    ),
}


@pytest.mark.parametrize("outcome", RESOLUTIONS)
async def test_resolve_records_the_decision_at_the_call_step(
    outcome: Any, ledger: Ledger, ids: str
) -> None:
    value, expected, (state, settled_as) = RESOLUTIONS[outcome]
    submission = await _unknown(ledger, ids)

    result, written = await _decided(
        ledger, ids, submission, lambda: ledger.operator.resolve(submission, outcome, value)
    )

    assert (result.state, result.outcome) == (state, settled_as)
    assert _kinds(written) == expected
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"]) == (state, settled_as)
    if state == "input-applied":  # resumes: claimable, and recovery no longer sees an unknown
        begun = await ledger.begin(ids)
        assert await ledger.maintenance.recover(ids, begun.epoch) == Recovery()
        claim = await ledger.attempts.claim_head(ids, begun.epoch, ids, bindings=BINDINGS)
        assert claim is not None and claim.submission_id == submission


# --- not waiting ----------------------------------------------------------------------------

ACTIONS: dict[str, Callable[[Operator, str], Awaitable[Any]]] = {
    "approve": lambda operator, s: operator.approve(s),
    "deny": lambda operator, s: operator.deny(s, "no"),
    "resolve": lambda operator, s: operator.resolve(s, "ran", {"charged": 5}),
}
ALL_ACTIONS: dict[str, Callable[[Operator, str], Awaitable[Any]]] = {
    **ACTIONS,
    "abort": lambda operator, s: operator.abort(s),
}
WRONG_STATES = [
    (action, state)
    for action, waits_in in (
        ("approve", "suspended"),
        ("deny", "suspended"),
        ("resolve", "unknown"),
    )
    for state in STATES
    if state != waits_in and (action, state) != ("approve", "input-applied")
]
"""Every state a decision is refused in; approving an approved submission is a repeat instead
(`test_approving_twice_changes_nothing`)."""


@pytest.mark.parametrize(("action", "state"), WRONG_STATES)
async def test_decision_on_a_submission_not_waiting_for_it_raises_and_writes_nothing(
    action: str, state: str, ledger: Ledger, ids: str
) -> None:
    submission = await STATES[state](ledger, ids)
    before = await ledger.snapshot(ids)

    with pytest.raises(NotWaiting, match=submission):
        await ACTIONS[action](ledger.operator, submission)

    assert await ledger.snapshot(ids) == before


async def test_approving_twice_changes_nothing(ledger: Ledger, ids: str) -> None:
    submission = await _input_applied(ledger, ids)
    before = await ledger.snapshot(ids)

    repeat = await ledger.operator.approve(submission)

    assert (repeat.state, repeat.changed) == ("input-applied", False)
    assert await ledger.snapshot(ids) == before  # no record, no dirty++, no alarm


@pytest.mark.parametrize("action", ALL_ACTIONS)
async def test_decision_on_a_missing_submission_raises_not_found(
    action: str, ledger: Ledger, ids: str
) -> None:
    await ledger.admit(ids)
    before = await ledger.snapshot(ids)
    with pytest.raises(NotFound, match="sub_missing"):
        await ALL_ACTIONS[action](ledger.operator, "sub_missing")

    assert await ledger.snapshot(ids) == before


# --- abort ----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["ready", "suspended", "unknown", "input-applied"])
async def test_abort_of_a_head_no_attempt_runs_settles_aborted_at_once(
    state: str, ledger: Ledger, ids: str
) -> None:
    submission = await STATES[state](ledger, ids)

    result, written = await _decided(
        ledger, ids, submission, lambda: ledger.operator.abort(submission)
    )

    assert (result.state, result.outcome) == ("settled", "aborted")
    assert _kinds(written) == [
        (
            "settlement",
            None,
            {"outcome": "aborted", "result": None, "reason": "aborted by an operator"},
        )
    ]
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"]) == ("settled", "aborted")


async def test_abort_of_a_queued_follower_settles_it_and_leaves_the_running_head(
    ledger: Ledger, ids: str
) -> None:
    head = await ledger.admit(ids)
    follower = await ledger.admit(ids)
    await ledger.claim(ids)
    head_before = await ledger.row(head)

    result, written = await _decided(ledger, ids, follower, lambda: ledger.operator.abort(follower))

    assert (result.state, result.outcome) == ("settled", "aborted")
    assert [(r["kind"], r["body"]["outcome"]) for r in written] == [("settlement", "aborted")]
    assert (await ledger.row(follower))["state"] == "settled"
    assert await ledger.row(head) == head_before
    assert await ledger.records(head) == []


async def test_abort_of_a_queued_follower_does_not_fence_the_running_head(
    ledger: Ledger, ids: str
) -> None:
    await ledger.admit(ids)
    follower = await ledger.admit(ids)
    claim = await ledger.claim(ids)

    await ledger.operator.abort(follower)

    await ledger.attempts.append(claim, "message", {"text": "still mine"}, step=1)
    await ledger.attempts.settle(claim, "completed")


async def test_abort_of_a_running_head_stops_it_at_its_next_boundary(
    ledger: Ledger, ids: str
) -> None:
    submission = await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.append(claim, "message", {"text": "before"}, step=1)

    result, written = await _decided(
        ledger, ids, submission, lambda: ledger.operator.abort(submission)
    )

    assert (result.state, result.outcome, result.changed) == ("running", None, True)
    assert written == []
    row = await ledger.row(submission)
    assert (row["state"], row["abort_requested"]) == ("running", True)
    before = await ledger.snapshot(ids)
    with pytest.raises(AbortRequested):
        await ledger.attempts.append(claim, "message", {"text": "after"}, step=2)
    assert await ledger.snapshot(ids) == before
    # What the attempt does next: settle aborted, exactly once.
    await ledger.attempts.settle(claim, "aborted", reason="aborted by an operator")
    assert [s["body"]["outcome"] for s in await ledger.settlements(submission)] == ["aborted"]


async def test_abort_of_a_settled_submission_changes_nothing(ledger: Ledger, ids: str) -> None:
    submission = await _settled(ledger, ids)
    before = await ledger.snapshot(ids)

    result = await ledger.operator.abort(submission)

    assert (result.state, result.outcome, result.changed) == ("settled", "completed", False)
    assert await ledger.snapshot(ids) == before


@pytest.mark.parametrize("appended", [False, True], ids=["reserved", "record-appended"])
async def test_abort_of_a_terminalizing_submission_keeps_the_reserved_outcome(
    appended: bool, ledger: Ledger, ids: str
) -> None:
    submission = await ledger.admit(ids)
    claim = await ledger.claim(ids)
    await ledger.attempts.reserve(claim, "completed", result={"answer": 42})
    if appended:
        await append_settlement(ledger, ids, submission, claim.epoch)

    await ledger.operator.abort(submission)
    await ledger.lapse(submission)
    begun = await ledger.begin(ids)
    await ledger.maintenance.recover(ids, begun.epoch)

    settlements = await ledger.settlements(submission)
    assert [s["body"]["outcome"] for s in settlements] == ["completed"]
    row = await ledger.row(submission)
    assert (row["state"], row["outcome"]) == ("settled", "completed")
    with pytest.raises((StaleAttempt, StalePass)):  # a newer pass and recovery took over
        await ledger.attempts.complete_settlement(claim)
