"""Aborts: an operator's abort of one submission, and the abort requests an ``if_busy="interrupt"``
admission makes of every unsettled submission of its thread.

A waiting or queued submission settles ``aborted`` at once; a running one is asked to stop at
its next committed boundary; a parent with children it has not joined is made claimable so its
next attempt aborts and joins them first (docs/protocol.md, "Subagent children"). An abort of a
settled submission, or of one already asked, changes nothing.
"""

from __future__ import annotations

from threadwarden.ledger.child_settled import unjoined_children
from threadwarden.ledger.locked_submission import LockedSubmission, lock_submission
from threadwarden.ledger.pool import Connection
from threadwarden.views import OperatorResult

_UNJOINED_CHILDREN = f"SELECT EXISTS ({unjoined_children('$1')})"
"""Whether the submission delegated to a child it has not joined yet."""
_ABORT_PARENT = """
UPDATE threadwarden.submissions
   SET abort_requested = true,
       state = CASE WHEN state = 'suspended' THEN 'input-applied' ELSE state END
 WHERE submission_id = $1
"""
"""A parent asked to abort becomes claimable: its next attempt aborts and joins its children."""
_ASK_TO_ABORT = (
    "UPDATE threadwarden.submissions SET abort_requested = true WHERE submission_id = $1"
)
"""A running attempt stops at its next committed boundary; an ``unknown`` one after it is
resolved."""


async def abort(held: LockedSubmission, reason: str) -> OperatorResult:
    """Abort the locked submission: at once unless an attempt runs or children are unjoined;
    ``reason`` is recorded with an abort settled here."""
    state = held.state
    if state in ("settled", "terminalizing"):  # settled, or an outcome is reserved: it stands
        return held.unchanged()
    if state == "running":
        return await _ask(held, _ASK_TO_ABORT, "running")
    if await held.conn.fetchval(_UNJOINED_CHILDREN, held.submission_id):
        return await _ask(held, _ABORT_PARENT, "input-applied" if state == "suspended" else state)
    # No attempt owns a row that is not running, so the thread is not fenced: a queued
    # follower's abort must not disturb the head's live attempt.
    epoch = await held.conn.fetchval(
        "SELECT producer_epoch FROM threadwarden.threads WHERE thread_id = $1", held.thread_id
    )
    return await held.settle("aborted", reason, int(epoch))


async def _ask(held: LockedSubmission, statement: str, state: str) -> OperatorResult:
    """Ask the submission to abort with ``statement``, leaving it ``state``; asked before, its
    next attempt is on it already and nothing changes."""
    if held.row["abort_requested"]:
        return held.unchanged()
    await held.conn.execute(statement, held.submission_id)
    await held.mark_dirty()
    return held.result(state)


async def interrupt(
    conn: Connection, thread_id: str, by: str, *, minimum_alarm_delay_ms: int
) -> list[OperatorResult]:
    """Inside an admission's transaction, before it writes: ask every unsettled submission of
    the thread to abort, as `abort` does (a waiting or queued one settles now, a running one at
    its next committed boundary), marking each ``interrupted_by`` ``by``. One whose side
    effect's outcome is ``unknown`` stays so until a person resolves it (the inbox), and the
    attempt after that resolution aborts. Returns what changed, in queue order."""
    found = await conn.fetch(
        "SELECT submission_id FROM threadwarden.submissions"
        " WHERE thread_id = $1 AND state <> 'settled' ORDER BY sequence",
        thread_id,
    )
    results = []
    for submission in found:
        held = await lock_submission(
            conn, submission["submission_id"], minimum_alarm_delay_ms=minimum_alarm_delay_ms
        )
        if held.state == "unknown":
            result = await _ask(held, _ASK_TO_ABORT, "unknown")
        else:
            result = await abort(held, f"interrupted by {by}")
        if result.changed:
            await conn.execute(
                "UPDATE threadwarden.submissions SET interrupted_by = $2 WHERE submission_id = $1",
                held.submission_id,
                by,
            )
            results.append(result)
    return results
