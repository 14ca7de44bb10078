"""Operator mutations: approve, deny, answer a question, resolve an unknown side effect, abort.

Each is one transaction through the mutation gate: it records the decision canonically, moves
the submission on (or settles it), bumps ``dirty`` and ensures the alarm. The caller wakes the
host after commit.

Decisions are idempotent: when nothing waits for a decision any more and the submission's latest
decision of that kind is the same one (approve after approve, deny after deny, resolve with the
same outcome and result, abort of a settled submission or of one already asked to stop), the
result says ``changed=False`` and nothing is written. A different decision than the one recorded
raises `DecisionConflict`.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import asyncpg

from threadwarden.errors import DecisionConflict, NotFound, NotWaiting
from threadwarden.ledger.child_settled import lock_hosts, unjoined_children
from threadwarden.ledger.gate import mark_dirty
from threadwarden.ledger.models import ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import (
    HistoryRecord,
    fence_thread,
    insert_record,
    journal,
    pending_step,
    settle_now,
    unresolved_side_effect,
)
from threadwarden.validation import canonical_json, validate_answer
from threadwarden.views import OperatorResult

Resolution = Literal["ran", "not-run", "fail"]

_FIND = """
SELECT t.host_id, s.thread_id, pt.host_id AS parent_host_id
  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
  LEFT JOIN threadwarden.submissions p ON p.submission_id = s.parent_submission_id
  LEFT JOIN threadwarden.threads pt ON pt.thread_id = p.thread_id
 WHERE s.submission_id = $1
"""
"""The submission's host and thread, and its parent's host when it is a child."""
_UNJOINED_CHILDREN = f"SELECT EXISTS ({unjoined_children('$1')})"
"""Whether the submission delegated to a child it has not joined yet."""
_ABORT_PARENT = """
UPDATE threadwarden.submissions
   SET abort_requested = true,
       state = CASE WHEN state = 'suspended' THEN 'input-applied' ELSE state END
 WHERE submission_id = $1
"""
"""A parent asked to abort becomes claimable: its next attempt aborts and joins its children."""


class Operator:
    """Decisions a person takes on waiting submissions."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def approve(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Grant the pending approval: the submission resumes (``input-applied``).

        ``operator`` (who decided) is recorded in the decision's body when given."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._lock(conn, submission_id)
            steps = await journal(conn, submission_id)
            request = self._pending(row, steps, "suspended", "approval-requested")
            if request is None:
                return self._repeat(row, _approval(steps), True, "approved")
            await self._decide(conn, row, request, _by({"approved": True}, operator))
            await self._move(conn, row, "input-applied")
            return self._result(row, "input-applied")

    async def deny(
        self, submission_id: str, reason: str | None = None, *, operator: str | None = None
    ) -> OperatorResult:
        """Refuse the pending approval: the decision is recorded and the submission fails, or,
        when the request said ``on_deny: resume``, resumes (``input-applied``) to hear it."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._lock(conn, submission_id)
            steps = await journal(conn, submission_id)
            request = self._pending(row, steps, "suspended", "approval-requested")
            if request is None:
                return self._repeat(row, _approval(steps), False, "denied")
            body = _by({"approved": False, "reason": reason}, operator)
            epoch = await self._decide(conn, row, request, body)
            if isinstance(request.body, dict) and request.body.get("on_deny") == "resume":
                # The binding asked to hear a denial (an agent tells its model): it runs again.
                await self._move(conn, row, "input-applied")
                return self._result(row, "input-applied")
            marker = await settle_now(
                conn,
                thread_id=row["thread_id"],
                submission_id=submission_id,
                outcome="failed",
                reason=f"approval denied{': ' + reason if reason else ''}",
                epoch=epoch,
                minimum_alarm_delay_ms=self._minimum_alarm_delay_ms,
            )
            await self._dirty(conn, row)
            return self._result(row, "settled", "failed", marker=marker)

    async def answer(
        self, submission_id: str, value: Any, *, operator: str | None = None
    ) -> OperatorResult:
        """Answer the pending question (`AttemptContext.ask`): the answer is recorded once and
        the submission resumes (``input-applied``) to receive it. A value the question's schema
        refuses raises `InvalidInput` before anything is written."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._lock(conn, submission_id)
            steps = await journal(conn, submission_id)
            question = self._pending(row, steps, "suspended", "input-requested", "input-answer")
            if question is None:
                return self._repeat(row, _answer(steps), value, "answered")
            body = question.body if isinstance(question.body, dict) else {}
            validate_answer(value, body.get("schema"))
            epoch = await fence_thread(conn, row["thread_id"])
            await self._record(
                conn, row, "input-answer", _by({"value": value}, operator), epoch, question.step
            )
            await self._move(conn, row, "input-applied")
            return self._result(row, "input-applied")

    async def resolve(
        self,
        submission_id: str,
        outcome: Resolution,
        result: Any = None,
        *,
        operator: str | None = None,
    ) -> OperatorResult:
        """Decide an unknown side effect: it ran (with ``result``), it did not run, or fail it."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._lock(conn, submission_id)
            steps = await journal(conn, submission_id)
            call = unresolved_side_effect(steps) if row["state"] == "unknown" else None
            if call is None:
                decided = (outcome, result if outcome == "ran" else None)
                return self._repeat(row, _resolution(steps), decided, "resolved")
            epoch = await fence_thread(conn, row["thread_id"])
            tool = call.body.get("tool")
            if outcome == "ran":
                await self._record(
                    conn,
                    row,
                    "tool-result",
                    _by({"tool": tool, "result": result, "resolved_by": "operator"}, operator),
                    epoch,
                    call.step,
                )
            else:
                await self._record(
                    conn,
                    row,
                    "tool-resolution",
                    _by({"tool": tool, "outcome": outcome}, operator),
                    epoch,
                    call.step,
                )
            if outcome == "fail":
                marker = await settle_now(
                    conn,
                    thread_id=row["thread_id"],
                    submission_id=submission_id,
                    outcome="failed",
                    reason=f"operator failed unresolved tool call {tool}",
                    epoch=epoch,
                    minimum_alarm_delay_ms=self._minimum_alarm_delay_ms,
                )
                await self._dirty(conn, row)
                return self._result(row, "settled", "failed", marker=marker)
            await self._move(conn, row, "input-applied")
            return self._result(row, "input-applied")

    async def abort(self, submission_id: str, *, operator: str | None = None) -> OperatorResult:
        """Abort: at once unless an attempt runs; then at its next committed boundary.

        A parent with unjoined children is not settled here: it is asked to abort and made
        claimable, and its next attempt aborts each unfinished child, joins every child's real
        outcome and only then settles ``aborted`` (docs/protocol.md, "Subagent children").
        ``operator`` (who asked) is named in the reason of an abort settled here."""
        reason = "aborted by an operator" + (f" ({operator})" if operator else "")
        async with self._pool.acquire() as conn, conn.transaction():
            row = await self._lock(conn, submission_id)
            return await self._abort(conn, row, reason)

    async def interrupt(self, conn: Connection, thread_id: str, by: str) -> list[OperatorResult]:
        """Inside an admission's transaction, before it writes: ask every unsettled submission
        of the thread to abort, as `abort` does (a waiting or queued one settles now, a running
        one at its next committed boundary), marking each ``interrupted_by`` ``by``. One whose
        side effect's outcome is ``unknown`` stays so until a person resolves it, then aborts.
        Returns what changed, in queue order."""
        found = await conn.fetch(
            "SELECT submission_id FROM threadwarden.submissions"
            " WHERE thread_id = $1 AND state <> 'settled' ORDER BY sequence",
            thread_id,
        )
        results = []
        for submission in found:
            row = await self._lock(conn, submission["submission_id"])
            if row["state"] == "unknown":
                result = await self._ask_to_abort(conn, row)
            else:
                result = await self._abort(conn, row, f"interrupted by {by}")
            if result.changed:
                await conn.execute(
                    "UPDATE threadwarden.submissions SET interrupted_by = $2"
                    " WHERE submission_id = $1",
                    row["submission_id"],
                    by,
                )
                results.append(result)
        return results

    async def _ask_to_abort(self, conn: Connection, row: asyncpg.Record) -> OperatorResult:
        """An interrupted side effect of unknown outcome stays ``unknown``: a person resolves it
        (the inbox), and the attempt after that resolution aborts (``abort_requested``)."""
        if row["abort_requested"]:
            return self._result(row, "unknown", changed=False)
        await conn.execute(
            "UPDATE threadwarden.submissions SET abort_requested = true WHERE submission_id = $1",
            row["submission_id"],
        )
        await self._dirty(conn, row)
        return self._result(row, "unknown")

    async def _abort(self, conn: Connection, row: asyncpg.Record, reason: str) -> OperatorResult:
        submission_id = row["submission_id"]
        if row["state"] == "settled":
            return self._result(row, "settled", row["outcome"], changed=False)
        if row["state"] == "terminalizing":  # an outcome is reserved: it stands
            return self._result(row, "terminalizing", changed=False)
        if row["state"] == "running":
            if row["abort_requested"]:  # asked before: the attempt stops at its boundary
                return self._result(row, "running", changed=False)
            await conn.execute(
                "UPDATE threadwarden.submissions SET abort_requested = true"
                " WHERE submission_id = $1",
                submission_id,
            )
            await self._dirty(conn, row)
            return self._result(row, "running")
        if await conn.fetchval(_UNJOINED_CHILDREN, submission_id):
            if row["abort_requested"]:  # asked before: its next attempt is on it
                return self._result(row, row["state"], changed=False)
            await conn.execute(_ABORT_PARENT, submission_id)
            await self._dirty(conn, row)
            state = "input-applied" if row["state"] == "suspended" else row["state"]
            return self._result(row, state)
        # No attempt owns a row that is not running, so the thread is not fenced: a queued
        # follower's abort must not disturb the head's live attempt.
        epoch = await conn.fetchval(
            "SELECT producer_epoch FROM threadwarden.threads WHERE thread_id = $1",
            row["thread_id"],
        )
        marker = await settle_now(
            conn,
            thread_id=row["thread_id"],
            submission_id=submission_id,
            outcome="aborted",
            reason=reason,
            epoch=int(epoch),
            minimum_alarm_delay_ms=self._minimum_alarm_delay_ms,
        )
        await self._dirty(conn, row)
        return self._result(row, "settled", "aborted", marker=marker)

    async def _lock(self, conn: Connection, submission_id: str) -> asyncpg.Record:
        found = await conn.fetchrow(_FIND, submission_id)
        if found is None:
            raise NotFound(f"submission: no submission {submission_id!r}")
        # Lock order everywhere: hosts, then threads, then submissions. A child's settlement
        # also records its marker on the parent's host: both hosts, in byte order, first.
        if found["parent_host_id"] is not None:
            await lock_hosts(conn, (found["host_id"], found["parent_host_id"]))
        await conn.execute(
            "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", found["host_id"]
        )
        await conn.execute(
            "SELECT 1 FROM threadwarden.threads WHERE thread_id = $1 FOR UPDATE",
            found["thread_id"],
        )
        row = await conn.fetchrow(
            "SELECT s.submission_id, s.thread_id, t.host_id, s.state, s.outcome,"
            "       s.abort_requested"
            "  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)"
            " WHERE s.submission_id = $1 FOR UPDATE OF s",
            submission_id,
        )
        assert row is not None
        return cast(asyncpg.Record, row)

    @staticmethod
    def _pending(
        row: asyncpg.Record,
        steps: list[HistoryRecord],
        state: str,
        opened: str,
        closer: str = "approval-decision",
    ) -> HistoryRecord | None:
        """The open request a decision answers, or None when the submission waits for none."""
        if row["state"] != state:
            return None
        return pending_step(steps, opened, (closer,))

    @classmethod
    def _repeat(cls, row: asyncpg.Record, latest: Any, wanted: Any, verb: str) -> OperatorResult:
        """Nothing waits for this decision: a repeat of the latest one changes nothing, another
        decision conflicts with it, and with none recorded the submission never waited."""
        submission_id, state = row["submission_id"], row["state"]
        if latest is _NONE:
            raise NotWaiting(
                f"submission {submission_id}: not waiting for this decision (state {state})"
            )
        if latest != wanted:
            raise DecisionConflict(
                f"submission {submission_id}: already {_describe(latest, verb)}; this decision"
                f" conflicts with it (state {state})"
            )
        return cls._result(row, state, row["outcome"], changed=False)

    async def _decide(
        self, conn: Connection, row: asyncpg.Record, request: HistoryRecord, body: dict[str, Any]
    ) -> int:
        epoch = await fence_thread(conn, row["thread_id"])
        await self._record(conn, row, "approval-decision", body, epoch, request.step)
        return epoch

    async def _record(
        self,
        conn: Connection,
        row: asyncpg.Record,
        kind: str,
        body: Any,
        epoch: int,
        step: int | None,
    ) -> None:
        await insert_record(
            conn,
            thread_id=row["thread_id"],
            submission_id=row["submission_id"],
            kind=kind,
            body=body,
            epoch=epoch,
            step=step,
        )

    async def _move(self, conn: Connection, row: asyncpg.Record, state: str) -> None:
        await conn.execute(
            "UPDATE threadwarden.submissions SET state = $2 WHERE submission_id = $1",
            row["submission_id"],
            state,
        )
        await self._dirty(conn, row)

    async def _dirty(self, conn: Connection, row: asyncpg.Record) -> None:
        await mark_dirty(conn, row["host_id"], minimum_alarm_delay_ms=self._minimum_alarm_delay_ms)

    @staticmethod
    def _result(
        row: asyncpg.Record,
        state: str,
        outcome: str | None = None,
        *,
        changed: bool = True,
        marker: ChildSettled | None = None,
    ) -> OperatorResult:
        return OperatorResult(
            submission_id=row["submission_id"],
            thread_id=row["thread_id"],
            host_id=row["host_id"],
            state=state,
            outcome=outcome,
            changed=changed,
            parent_host_id=marker.parent_host_id if marker and marker.recorded else None,
        )


_NONE = object()
"""No decision of that kind was ever recorded."""


def _by(body: dict[str, Any], operator: str | None) -> dict[str, Any]:
    """A decision's body, naming who took it (``operator``) when known."""
    return body if operator is None else {**body, "operator": operator}


def _approval(steps: list[HistoryRecord]) -> Any:
    """The latest approval decision: True (approved), False (denied), or `_NONE`."""
    decisions = [r for r in steps if r.kind == "approval-decision" and isinstance(r.body, dict)]
    return bool(decisions[-1].body.get("approved")) if decisions else _NONE


def _answer(steps: list[HistoryRecord]) -> Any:
    """The latest answer given to a question, or `_NONE`."""
    answers = [r for r in steps if r.kind == "input-answer" and isinstance(r.body, dict)]
    return answers[-1].body.get("value") if answers else _NONE


def _resolution(steps: list[HistoryRecord]) -> Any:
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
