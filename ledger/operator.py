"""Operator decisions: approve, deny, answer a question, resolve an unknown side effect, abort.

Each is one transaction through the mutation gate on the submission it locks
(`threadwarden.ledger.locked_submission`): it records the decision canonically, moves the
submission on (or settles it), bumps ``dirty`` and ensures the alarm. The caller wakes the host
after commit. Aborts, an operator's and an interrupting admission's, are
`threadwarden.ledger.aborts`.

Decisions are idempotent: when nothing waits for a decision any more and the submission's latest
decision of that kind is the same one (approve after approve, deny after deny, resolve with the
same outcome and result, abort of a settled submission or of one already asked to stop), the
result says ``changed=False`` and nothing is written. A different decision than the one recorded
raises `DecisionConflict`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import asyncpg

from threadwarden.bindings import ThreadRecord
from threadwarden.errors import DecisionConflict, NotWaiting
from threadwarden.ledger import aborts
from threadwarden.ledger.locked_submission import LockedSubmission, lock_submission
from threadwarden.ledger.records import (
    fence_thread,
    journal,
    pending_step,
    unresolved_side_effect,
)
from threadwarden.validation import canonical_json, validate_answer
from threadwarden.views import OperatorResult

Resolution = Literal["ran", "not-run", "fail"]


class Operator:
    """Decisions a person takes on waiting submissions."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def approve(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Grant the pending approval: the submission resumes (``input-applied``).

        ``operator`` (who decided) is recorded in the decision's body when given."""
        return await self._decide_approval(submission_id, _by({"approved": True}, operator))

    async def deny(
        self, submission_id: str, reason: str | None = None, *, operator: str | None = None
    ) -> OperatorResult:
        """Refuse the pending approval: the decision is recorded and the submission fails, or,
        when the request said ``on_deny: resume``, resumes (``input-applied``) to hear it."""
        body = _by({"approved": False, "reason": reason}, operator)
        return await self._decide_approval(
            submission_id, body, failure=f"approval denied{': ' + reason if reason else ''}"
        )

    async def _decide_approval(
        self, submission_id: str, body: dict[str, Any], *, failure: str = ""
    ) -> OperatorResult:
        """Record the approval decision ``body`` at the pending request's step; an approval, or
        a denial the request asked to hear (``on_deny: resume``), resumes the submission, any
        other denial settles it ``failed`` with ``failure``."""
        approved = bool(body["approved"])
        async with self._journaled(submission_id) as (held, steps):
            request = _pending(held, steps, "suspended", "approval-requested")
            if request is None:
                verb = "approved" if approved else "denied"
                return _repeat(held, _approval(steps), approved, verb)
            epoch = await fence_thread(held.conn, held.thread_id)
            await held.record("approval-decision", body, epoch, request.step)
            request_body = request.body if isinstance(request.body, dict) else {}
            # The binding may ask to hear a denial (an agent tells its model): it runs again.
            if approved or request_body.get("on_deny") == "resume":
                return await held.move("input-applied")
            return await held.settle("failed", failure, epoch)

    async def answer(
        self, submission_id: str, value: Any, *, operator: str | None = None
    ) -> OperatorResult:
        """Answer the pending question (`AttemptContext.ask`): the answer is recorded once and
        the submission resumes (``input-applied``) to receive it. A value the question's schema
        refuses raises `InvalidInput` before anything is written."""
        async with self._journaled(submission_id) as (held, steps):
            question = _pending(held, steps, "suspended", "input-requested", "input-answer")
            if question is None:
                return _repeat(held, _answer(steps), value, "answered")
            body = question.body if isinstance(question.body, dict) else {}
            validate_answer(value, body.get("schema"))
            epoch = await fence_thread(held.conn, held.thread_id)
            await held.record("input-answer", _by({"value": value}, operator), epoch, question.step)
            return await held.move("input-applied")

    async def resolve(
        self,
        submission_id: str,
        outcome: Resolution,
        result: Any = None,
        *,
        operator: str | None = None,
    ) -> OperatorResult:
        """Decide an unknown side effect: it ran (with ``result``), it did not run, or fail it."""
        async with self._journaled(submission_id) as (held, steps):
            call = unresolved_side_effect(steps) if held.state == "unknown" else None
            if call is None:
                decided = (outcome, result if outcome == "ran" else None)
                return _repeat(held, _resolution(steps), decided, "resolved")
            epoch = await fence_thread(held.conn, held.thread_id)
            tool = call.body.get("tool")
            if outcome == "ran":
                kind, body = (
                    "tool-result",
                    {"tool": tool, "result": result, "resolved_by": "operator"},
                )
            else:
                kind, body = "tool-resolution", {"tool": tool, "outcome": outcome}
            await held.record(kind, _by(body, operator), epoch, call.step)
            if outcome == "fail":
                return await held.settle(
                    "failed", f"operator failed unresolved tool call {tool}", epoch
                )
            return await held.move("input-applied")

    async def abort(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Abort: at once unless an attempt runs; then at its next committed boundary.

        A parent with unjoined children is not settled here: it is asked to abort and made
        claimable, and its next attempt aborts each unfinished child, joins every child's real
        outcome and only then settles ``aborted`` (`threadwarden.ledger.aborts`). ``operator``
        (who asked) is named in the reason of an abort settled here."""
        reason = "aborted by an operator" + (f" ({operator})" if operator else "")
        async with self._locked(submission_id) as held:
            return await aborts.abort(held, reason)

    @contextlib.asynccontextmanager
    async def _locked(self, submission_id: str) -> AsyncIterator[LockedSubmission]:
        """The submission, locked in a transaction that commits when the block ends."""
        async with self._pool.acquire() as conn, conn.transaction():
            yield await lock_submission(
                conn, submission_id, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
            )

    @contextlib.asynccontextmanager
    async def _journaled(
        self, submission_id: str
    ) -> AsyncIterator[tuple[LockedSubmission, list[ThreadRecord]]]:
        """`_locked`, with the submission's journal (what it waits for, what was decided)."""
        async with self._locked(submission_id) as held:
            yield held, await journal(held.conn, submission_id)


def _pending(
    held: LockedSubmission,
    steps: list[ThreadRecord],
    state: str,
    opened: str,
    closer: str = "approval-decision",
) -> ThreadRecord | None:
    """The open request a decision answers, or None when the submission waits for none."""
    if held.state != state:
        return None
    return pending_step(steps, opened, (closer,))


def _repeat(held: LockedSubmission, latest: Any, wanted: Any, verb: str) -> OperatorResult:
    """Nothing waits for this decision: a repeat of the latest one changes nothing, another
    decision conflicts with it, and with none recorded the submission never waited."""
    submission_id, state = held.submission_id, held.state
    if latest is _NONE:
        raise NotWaiting(
            f"submission {submission_id}: not waiting for this decision (state {state})"
        )
    if latest != wanted:
        raise DecisionConflict(
            f"submission {submission_id}: already {_describe(latest, verb)}; this decision"
            f" conflicts with it (state {state})"
        )
    return held.unchanged()


_NONE = object()
"""No decision of that kind was ever recorded."""


def _by(body: dict[str, Any], operator: str | None) -> dict[str, Any]:
    """A decision's body, naming who took it (``operator``) when known."""
    return body if operator is None else {**body, "operator": operator}


def _approval(steps: list[ThreadRecord]) -> Any:
    """The latest approval decision: True (approved), False (denied), or `_NONE`."""
    decisions = [r for r in steps if r.kind == "approval-decision" and isinstance(r.body, dict)]
    return bool(decisions[-1].body.get("approved")) if decisions else _NONE


def _answer(steps: list[ThreadRecord]) -> Any:
    """The latest answer given to a question, or `_NONE`."""
    answers = [r for r in steps if r.kind == "input-answer" and isinstance(r.body, dict)]
    return answers[-1].body.get("value") if answers else _NONE


def _resolution(steps: list[ThreadRecord]) -> Any:
    """The latest operator resolution of an unknown side effect: ``(outcome, result)`` (a result
    only for ``ran``), or `_NONE`."""
    for record in reversed(steps):
        body = record.body if isinstance(record.body, dict) else {}
        if record.kind == "tool-result" and body.get("resolved_by") == "operator":
            return ("ran", body.get("result"))
        if record.kind == "tool-resolution":
            return (body.get("outcome"), None)
    return _NONE


def _describe(latest: Any, verb: str) -> str:
    if verb == "answered":
        return f"answered {canonical_json(latest)}"[:160]
    if isinstance(latest, bool):
        return "approved" if latest else "denied"
    outcome, result = latest
    return f"{verb} {outcome}" + ("" if result is None else f" with result {result!r}"[:120])
