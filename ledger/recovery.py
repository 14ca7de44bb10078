"""Recovery: before any new claim, every stalled head of a host gets a disposition.

- a reserved settlement (``terminalizing``) is finished from the reservation: *repaired*;
- a lapsed attempt asked to abort settles ``aborted``: *repaired*; unless it is a parent with
  unjoined children: it is ``ready`` again, and the next claim aborts and joins its children
  before it settles;
- a lapsed attempt with a side-effecting tool call but no result becomes ``unknown`` (never
  replayed automatically): *unknown*;
- any other lapsed attempt is ``ready`` again (the next claim takes a higher epoch): *repaired*;
- a live attempt is left alone: *deferred*.
"""

from __future__ import annotations

import asyncpg
from pydantic import BaseModel

from threadwarden.ledger.child_settled import unjoined_children
from threadwarden.ledger.models import ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import (
    abort_reason,
    fence_thread,
    journal,
    settle_now,
    unresolved_side_effect,
)

_STALLED = f"""
SELECT s.submission_id, s.thread_id, s.state, s.abort_requested, s.reserved_outcome,
       s.reserved_result, s.reserved_reason, s.interrupted_by,
       s.abort_requested AND EXISTS ({unjoined_children("s.submission_id")})
         AS unjoined_children,
       s.lease_expires_at IS NOT NULL AND s.lease_expires_at > clock_timestamp() AS leased
  FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
 WHERE t.host_id = $1 AND s.state IN ('running', 'terminalizing')
 ORDER BY s.thread_id, s.sequence
 FOR UPDATE OF s
"""


class Recovery(BaseModel):
    """How many stalled rows recovery repaired, left to a live attempt, or marked unknown."""

    repaired: int = 0
    deferred: int = 0
    unknown: int = 0
    parent_hosts: list[str] = []
    """Hosts of parents whose child recovery settled (their marker made them dirty): wake them
    after commit."""


async def recover_host(conn: Connection, host_id: str) -> Recovery:
    """Run recovery for ``host_id``; the caller holds the host row and checked the pass.

    A child settled here records its marker on its parent's host in this transaction; the
    caller (`Maintenance.recover`) locked the parents' hosts that sort before this one first, so
    the hosts are taken in byte order.
    """
    recovery = Recovery()
    for row in await conn.fetch(_STALLED, host_id):
        disposition = await _recover_row(conn, row, recovery)
        setattr(recovery, disposition, getattr(recovery, disposition) + 1)
    return recovery


async def _recover_row(conn: Connection, row: asyncpg.Record, recovery: Recovery) -> str:
    submission_id, thread_id = row["submission_id"], row["thread_id"]
    if row["state"] == "terminalizing":
        epoch = await fence_thread(conn, thread_id)
        marker = await settle_now(
            conn,
            thread_id=thread_id,
            submission_id=submission_id,
            outcome=row["reserved_outcome"],
            result=row["reserved_result"],
            reason=row["reserved_reason"],
            epoch=epoch,
        )
        _note(recovery, marker)
        return "repaired"
    if row["leased"]:
        return "deferred"
    # A side effect in flight stays `unknown` even when the submission was asked to abort: a
    # person says whether it ran, and the abort lands once that is recorded (its next attempt).
    unresolved = unresolved_side_effect(await journal(conn, submission_id)) is not None
    if row["abort_requested"] and not row["unjoined_children"] and not unresolved:
        epoch = await fence_thread(conn, thread_id)
        marker = await settle_now(
            conn,
            thread_id=thread_id,
            submission_id=submission_id,
            outcome="aborted",
            reason=abort_reason(row["interrupted_by"]),
            epoch=epoch,
        )
        _note(recovery, marker)
        return "repaired"
    state = "unknown" if unresolved else "ready"
    await conn.execute(
        "UPDATE threadwarden.submissions SET state = $2, ownership_token = NULL,"
        " lease_expires_at = NULL WHERE submission_id = $1",
        submission_id,
        state,
    )
    return "unknown" if state == "unknown" else "repaired"


def _note(recovery: Recovery, marker: ChildSettled | None) -> None:
    if marker is not None and marker.recorded:
        recovery.parent_hosts.append(marker.parent_host_id)
