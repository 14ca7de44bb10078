"""Subagent children: establishment, the parent's wait, the child-settled marker, the join.

A child is an ordinary submission on its own thread, linked to the parent's tool call (its
journal step), established in one transaction (`threadwarden.ledger.child_establishment`).
The parent then suspends on its children without holding a claim; each child's settlement
writes a marker on the parent's host through the mutation gate and wakes the parent once every
child it waits for has settled; the parent's re-run joins each child's canonical settlement
once. docs/protocol.md, "Subagent
children", maps the protocol's mutations and crash points onto these transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

import asyncpg

from threadwarden.errors import (
    ChildConflict,
    ChildNotSettled,
    InvalidInput,
    NotFound,
)
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import append_in, fence
from threadwarden.ledger.child_establishment import ChildRequest, establish_child_in
from threadwarden.ledger.child_settled import record_child_settled_in, unjoined_children
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.models import (
    BudgetAccount,
    CallJoined,
    ChildReceipt,
    ChildSettled,
    ChildWait,
    UnjoinedChild,
)
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import record_statement

_CHILDREN = """
SELECT q.id AS submission_id, c.submission_id IS NOT NULL AS mine, m.outcome
  FROM unnest($2::text[]) WITH ORDINALITY AS q (id, n)
  LEFT JOIN threadwarden.submissions c
         ON c.submission_id = q.id AND c.parent_submission_id = $1
  LEFT JOIN threadwarden.child_settlements m
         ON m.parent_submission_id = $1 AND m.child_submission_id = q.id
 ORDER BY q.n
"""
"""Which listed submissions are the parent's children, and which have a settled marker."""
_SUSPEND = (
    "WITH stop AS (UPDATE threadwarden.submissions SET state = 'suspended',"
    " ownership_token = NULL, lease_expires_at = NULL WHERE submission_id = $2), "
    + record_statement(1)
)
"""End the parent's ownership without settling and record what it waits for, together."""
_UNJOINED = unjoined_children("$1") + " ORDER BY c.parent_call_step"
"""The parent's children it has not joined yet, by call step."""
_CALL = """
SELECT c.submission_id, c.thread_id,
       (SELECT json_build_object('record_id', r.record_id, 'body', r.body)
          FROM threadwarden.records r
         WHERE r.submission_id = c.submission_id COLLATE "default"
           AND r.kind = 'settlement') AS settlement,
       (SELECT r.body FROM threadwarden.records r
         WHERE r.submission_id = c.submission_id COLLATE "default"
           AND r.kind = 'lineage') AS lineage,
       (SELECT r.body FROM threadwarden.records r
         WHERE r.submission_id = $1 AND r.step = $2 AND r.kind = 'call-joined') AS joined,
       (SELECT COALESCE(sum((r.body ->> 'units')::bigint), 0) FROM threadwarden.records r
         WHERE r.submission_id = c.submission_id COLLATE "default"
           AND r.kind = 'budget-spent') AS consumed
  FROM threadwarden.submissions c
 WHERE c.parent_submission_id = $1 AND c.parent_call_step = $2
"""
"""The call's child with its settlement and lineage records, what it spent of its budget, and
the parent's join of it.
``COLLATE "default"`` lets the records' submission index serve the comparison."""


class Children:
    """Parent-child transactions: establish, suspend, record a settlement, join."""

    def __init__(
        self, pool: asyncpg.Pool[Any], admissions: Admissions, *, minimum_alarm_delay_ms: int
    ) -> None:
        self._pool = pool
        self._admissions = admissions
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def establish_child(
        self, claim: Claim, *, step: int, **request: Unpack[ChildRequest]
    ) -> ChildReceipt:
        """Admit the child of the parent's call at journal ``step``, in one transaction.

        The child is admitted (its host made dirty and armed), linked, given its lineage record
        and the parent records ``call-started``; the caller wakes the child's host after commit
        when ``wake`` is set. The same request returns the same receipt (``created=False``,
        nothing written). Raises `ChildConflict` when the call's child, or a submission holding
        its key, differs from the request; `StalePass`, `StaleAttempt` or `AbortRequested` when
        the parent's attempt no longer owns it; `HostMismatch` when the thread has another host.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            return await self.establish_child_in(conn, claim, step=step, **request)

    async def establish_child_in(
        self, conn: Connection, claim: Claim, *, step: int, **request: Unpack[ChildRequest]
    ) -> ChildReceipt:
        """`establish_child` inside the caller's transaction
        (`threadwarden.ledger.child_establishment`)."""
        return await establish_child_in(conn, self._admissions, claim, step=step, **request)

    async def suspend_for_children(self, claim: Claim, children: Sequence[str]) -> ChildWait:
        """The parent waits for ``children`` (its established children), ending its ownership.

        When every listed child already has a settled marker nothing is written and the
        attempt goes on under the same claim (``suspended=False``: join them now). Otherwise
        the parent is ``suspended`` with a ``children-awaited`` record listing them; the
        marker of the last one wakes it. Raises `InvalidInput` for a listed submission that is
        not this parent's child.
        """
        listed = list(dict.fromkeys(children))
        if not listed:
            raise InvalidInput("children", "at least one child submission id", children)
        async with self._pool.acquire() as conn, conn.transaction():
            await fence(conn, claim, honour_abort=False)
            # A statement after the fence's lock: it sees every marker committed before it.
            rows = await conn.fetch(_CHILDREN, claim.submission_id, listed)
            strangers = [r["submission_id"] for r in rows if not r["mine"]]
            if strangers:
                raise InvalidInput(
                    "children", f"child submissions of {claim.submission_id}", strangers
                )
            settled = [r["submission_id"] for r in rows if r["outcome"] is not None]
            waiting = [r["submission_id"] for r in rows if r["outcome"] is None]
            if not waiting:
                return ChildWait(suspended=False, settled=settled, waiting=[])
            await conn.fetchval(
                _SUSPEND,
                claim.thread_id,
                claim.submission_id,
                "children-awaited",
                {"children": listed},
                claim.epoch,
                None,
            )
        return ChildWait(suspended=True, settled=settled, waiting=waiting)

    async def record_child_settled(self, child_submission_id: str) -> ChildSettled:
        """Record the child's canonical settlement on its parent's host: once per child.

        A first record bumps the parent's host and arms its alarm (the caller wakes it after
        commit) and, when the parent waits for this child and every other child it listed has
        settled, moves the parent to ``input-applied`` (``woken``). A replay writes nothing
        (``not-waiting``, ``recorded=False``). Raises `NotFound` for an unknown submission,
        `NotWaiting` for one that is no child, `ChildNotSettled` while it has no settlement.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            return await self.record_child_settled_in(conn, child_submission_id)

    async def record_child_settled_in(
        self, conn: Connection, child_submission_id: str
    ) -> ChildSettled:
        """`record_child_settled` inside the caller's transaction (see
        `threadwarden.ledger.child_settled`)."""
        return await record_child_settled_in(
            conn, child_submission_id, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
        )

    async def unjoined(self, parent_submission_id: str) -> list[UnjoinedChild]:
        """The parent's children it has not joined yet, by call step (read-only)."""
        rows = await self._pool.fetch(_UNJOINED, parent_submission_id)
        return [UnjoinedChild(**dict(r)) for r in rows]

    async def join(self, claim: Claim, step: int) -> CallJoined:
        """Record the parent's result of its call at ``step`` from the child's canonical
        settlement: once (``call-joined``); a repeat returns the recorded outcome.

        Raises `NotFound` when the call has no child, `ChildNotSettled` while the child has not
        settled, `ChildConflict` when the child's lineage names another call.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await fence(conn, claim, honour_abort=False)
            call = await conn.fetchrow(_CALL, claim.submission_id, step)
            if call is None:
                raise NotFound(f"submission {claim.submission_id}: no child at step {step}")
            if call["joined"] is not None:
                return CallJoined(**call["joined"])
            settlement, lineage = call["settlement"], call["lineage"] or {}
            if settlement is None:
                raise ChildNotSettled(
                    f"submission {call['submission_id']}: the child of {claim.submission_id}"
                    f" step {step} has not settled"
                )
            if (lineage.get("parent_submission_id"), lineage.get("parent_call_step")) != (
                claim.submission_id,
                step,
            ):
                raise ChildConflict(
                    f"submission {call['submission_id']}: its lineage {lineage!r} does not"
                    f" name {claim.submission_id} step {step}"
                )
            body = settlement["body"]
            reserved = lineage.get("budget")
            consumed = int(call["consumed"])
            outcome = CallJoined(
                submission_id=call["submission_id"],
                thread_id=call["thread_id"],
                outcome=body["outcome"],
                result=body.get("result"),
                reason=body.get("reason"),
                settlement_record_id=settlement["record_id"],
                budget=None
                if reserved is None
                else BudgetAccount(
                    reserved=reserved, consumed=consumed, released=max(reserved - consumed, 0)
                ),
            )
            await append_in(conn, claim, "call-joined", outcome.model_dump(), step=step)
        return outcome
