"""Subagent children: establishment, the parent's wait, the child-settled marker, the join.

A child is an ordinary submission on its own thread, linked to the parent's tool call (its
journal step). Establishment admits it through the one admission path (`Admissions.admit_in`)
and, in the same transaction, writes its linkage, its lineage record and the parent's
``call-started`` record, so no intermediate state is ever visible. The parent then suspends on
its children without holding a claim; each child's settlement writes a marker on the parent's
host through the mutation gate and wakes the parent once every child it waits for has settled;
the parent's re-run joins each child's canonical settlement once. docs/protocol.md, "Subagent
children", maps the protocol's mutations and crash points onto these transactions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from threadwarden.errors import (
    ChildConflict,
    ChildNotSettled,
    InvalidInput,
    NotFound,
)
from threadwarden.ledger.admission import Admissions, payload_digest
from threadwarden.ledger.attempts import Claim, fence
from threadwarden.ledger.child_settled import (
    lock_hosts,
    record_child_settled_in,
    unjoined_children,
)
from threadwarden.ledger.models import (
    BudgetAccount,
    CallJoined,
    ChildReceipt,
    ChildSettled,
    ChildWait,
    UnjoinedChild,
)
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import insert_record, record_statement


def child_thread_id_for(parent_submission_id: str, step: int) -> str:
    """The default thread of the child a parent's journal step delegates to."""
    return f"child_{parent_submission_id.removeprefix('sub_')}_{step}"


def child_key_for(parent_submission_id: str, step: int) -> str:
    """The idempotency key of the child a parent's journal step delegates to."""
    return f"child:{parent_submission_id}:{step}"


_OWNER = "SELECT host_id FROM threadwarden.threads WHERE thread_id = $1"
_RESOLVE = """
SELECT (SELECT json_build_object('submission_id', c.submission_id, 'thread_id', c.thread_id,
               'host_id', ct.host_id, 'sequence', c.sequence,
               'payload_digest', c.payload_digest, 'idempotency_key', c.idempotency_key)
          FROM threadwarden.submissions c JOIN threadwarden.threads ct USING (thread_id)
         WHERE c.parent_submission_id = $1 AND c.parent_call_step = $2) AS existing,
       (SELECT (body ->> 'depth')::integer FROM threadwarden.records
         WHERE submission_id = $1 AND kind = 'lineage') AS parent_depth
"""
"""The call's child, if admitted (the linkage index), and the parent's own depth."""
_ANCESTOR_THREAD = """
WITH RECURSIVE up (submission_id, thread_id, parent) AS (
  SELECT submission_id, thread_id, parent_submission_id FROM threadwarden.submissions
   WHERE submission_id = $1
  UNION ALL
  SELECT s.submission_id, s.thread_id, s.parent_submission_id
    FROM threadwarden.submissions s JOIN up ON s.submission_id = up.parent
)
SELECT EXISTS (SELECT 1 FROM up WHERE thread_id = $2)
"""
"""Whether the thread is the caller's or one of its ancestors' (a child's own children only)."""
_LINK = """
UPDATE threadwarden.submissions s SET parent_submission_id = $2, parent_call_step = $3
  FROM threadwarden.threads t
 WHERE s.submission_id = $1 AND t.thread_id = s.thread_id
RETURNING t.producer_epoch
"""
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
        self,
        claim: Claim,
        *,
        step: int,
        agent_id: str,
        input: Any,
        thread_id: str | None = None,
        host_id: str | None = None,
        agent_digest: str | None = None,
        budget: int | None = None,
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
            return await self.establish_child_in(
                conn,
                claim,
                step=step,
                agent_id=agent_id,
                input=input,
                thread_id=thread_id,
                host_id=host_id,
                agent_digest=agent_digest,
                budget=budget,
            )

    async def establish_child_in(
        self,
        conn: Connection,
        claim: Claim,
        *,
        step: int,
        agent_id: str,
        input: Any,
        thread_id: str | None = None,
        host_id: str | None = None,
        agent_digest: str | None = None,
        budget: int | None = None,
    ) -> ChildReceipt:
        """`establish_child` inside the caller's transaction: nine statements for a new child,
        four for a repeat (which writes nothing)."""
        thread = thread_id or child_thread_id_for(claim.submission_id, step)
        if thread == claim.thread_id:
            raise InvalidInput("thread_id", "a thread other than the parent's own", thread)
        key = child_key_for(claim.submission_id, step)
        digest = payload_digest(agent_id, agent_digest, input)
        owner = await conn.fetchval(_OWNER, thread)
        host = host_id or owner or thread
        await lock_hosts(conn, (claim.host_id, host))
        await fence(conn, claim, honour_abort=True)
        resolved = await conn.fetchrow(_RESOLVE, claim.submission_id, step)
        assert resolved is not None
        existing = resolved["existing"]
        if existing is not None:
            return _repeated(existing, claim, step, key, thread, host_id, digest)
        if resolved["parent_depth"] is not None and await conn.fetchval(
            _ANCESTOR_THREAD, claim.submission_id, thread
        ):
            # Queued behind an ancestor that waits for this very call: it would never run.
            raise InvalidInput("thread_id", "a thread none of the caller's ancestors is on", thread)
        receipt = await self._admissions.admit_in(
            conn,
            thread_id=thread,
            agent_id=agent_id,
            input=input,
            host_id=host,
            key=key,
            digest=digest,
            agent_digest=agent_digest,
            source=None,
        )
        if not receipt.created:  # the key names a submission that is not this call's child
            raise ChildConflict(
                f"idempotency_key: {key!r} on thread {thread} names submission"
                f" {receipt.submission_id}, which is not the child of {claim.submission_id}"
                f" step {step}"
            )
        child_epoch = await conn.fetchval(_LINK, receipt.submission_id, claim.submission_id, step)
        depth = int(resolved["parent_depth"] or 0) + 1
        await insert_record(
            conn,
            thread_id=thread,
            submission_id=receipt.submission_id,
            kind="lineage",
            body={
                "parent_thread_id": claim.thread_id,
                "parent_submission_id": claim.submission_id,
                "parent_host_id": claim.host_id,
                "parent_call_step": step,
                "agent_id": agent_id,
                "payload_digest": digest,
                "depth": depth,
                "budget": budget,
            },
            epoch=int(child_epoch),
            step=0,  # in the child's journal: its attempts read their given budget from it
        )
        await insert_record(
            conn,
            thread_id=claim.thread_id,
            submission_id=claim.submission_id,
            kind="call-started",
            body={
                "child_thread_id": thread,
                "child_submission_id": receipt.submission_id,
                "child_host_id": receipt.host_id,
                "agent_id": agent_id,
                "idempotency_key": key,
                "payload_digest": digest,
                "budget": budget,
            },
            epoch=claim.epoch,
            step=step,
        )
        return ChildReceipt(
            **receipt.model_dump(),
            wake=receipt.wake,
            parent_submission_id=claim.submission_id,
            parent_call_step=step,
            idempotency_key=key,
        )

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
            await insert_record(
                conn,
                thread_id=claim.thread_id,
                submission_id=claim.submission_id,
                kind="call-joined",
                body=outcome.model_dump(),
                epoch=claim.epoch,
                step=step,
            )
        return outcome


def _repeated(
    existing: dict[str, Any],
    claim: Claim,
    step: int,
    key: str,
    thread: str,
    host_id: str | None,
    digest: str,
) -> ChildReceipt:
    """The receipt of the call's admitted child, if the request is the one it was made from."""
    diverges = [
        name
        for name, have, want in (
            ("thread_id", existing["thread_id"], thread),
            ("host_id", existing["host_id"], host_id or existing["host_id"]),
            ("payload", existing["payload_digest"], digest),
            ("idempotency_key", existing["idempotency_key"], key),
        )
        if have != want
    ]
    if diverges:
        raise ChildConflict(
            f"submission {claim.submission_id} step {step}: its child"
            f" {existing['submission_id']} was admitted with another {', '.join(diverges)}"
        )
    return ChildReceipt(
        submission_id=existing["submission_id"],
        thread_id=existing["thread_id"],
        host_id=existing["host_id"],
        sequence=int(existing["sequence"]),
        created=False,
        wake=False,
        parent_submission_id=claim.submission_id,
        parent_call_step=step,
        idempotency_key=key,
    )
