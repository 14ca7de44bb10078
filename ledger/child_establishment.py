"""Establishing a subagent child: one transaction admits the child, links it to the parent's
tool call, writes its lineage record and the parent's ``call-started`` record.

The child is admitted through the one admission path (`Admissions.admit_in`), so no
intermediate state is ever visible; the same request returns the same receipt. docs/protocol.md,
"Subagent children", maps the crash points onto these statements.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict, Unpack

from threadwarden.errors import ChildConflict, InvalidInput
from threadwarden.ledger.admission import Admissions, payload_digest
from threadwarden.ledger.attempts import append_in, fence
from threadwarden.ledger.child_settled import lock_hosts
from threadwarden.ledger.claims import Claim
from threadwarden.ledger.models import ChildReceipt
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import insert_record


class ChildRequest(TypedDict, total=False):
    """What a parent's call asks of its child: the agent and its input, and optionally the
    child's thread (default `child_thread_id_for`) and host, the agent's pinned digest and a
    budget for it."""

    agent_id: Required[str]
    input: Required[Any]
    thread_id: str | None
    host_id: str | None
    agent_digest: str | None
    budget: int | None


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


async def establish_child_in(
    conn: Connection,
    admissions: Admissions,
    claim: Claim,
    *,
    step: int,
    **request: Unpack[ChildRequest],
) -> ChildReceipt:
    """Establish the child of the parent's call at journal ``step`` inside the caller's
    transaction (`Children.establish_child`): nine statements for a new child, four for a
    repeat (which writes nothing)."""
    agent_id, input, agent_digest = (
        request["agent_id"],
        request["input"],
        request.get("agent_digest"),
    )
    host_id, budget = request.get("host_id"), request.get("budget")
    thread = request.get("thread_id") or child_thread_id_for(claim.submission_id, step)
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
    receipt = await admissions.admit_in(
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
    child = ChildReceipt(
        **receipt.model_dump(),
        wake=receipt.wake,
        parent_submission_id=claim.submission_id,
        parent_call_step=step,
        idempotency_key=key,
    )
    started = call_started_body(child, agent_id=agent_id, digest=digest, budget=budget)
    await append_in(conn, claim, "call-started", started, step=step)
    return child


def call_started_body(
    child: ChildReceipt, *, agent_id: str, digest: str, budget: int | None
) -> dict[str, Any]:
    """The body of the parent's ``call-started`` record for the call that established
    ``child``: where the child is, and the call's agent, payload digest and budget, which a
    re-run's call must match. The attempt keeps the same body in its journal."""
    return {
        "child_thread_id": child.thread_id,
        "child_submission_id": child.submission_id,
        "child_host_id": child.host_id,
        "agent_id": agent_id,
        "idempotency_key": child.idempotency_key,
        "payload_digest": digest,
        "budget": budget,
    }


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
