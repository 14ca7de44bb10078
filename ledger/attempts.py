"""Claims, fenced appends and the staged settlement of a thread's head.

A claim bumps the thread's producer epoch and mints an attempt id and ownership token with a
lease. Every later write of the attempt re-checks, in its own transaction, the host's pass epoch,
the submission's token and the thread's producer epoch; a stale attempt writes nothing. Records
carry the step of the binding's journal, so a re-run attempt replays what was committed.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime
from typing import Any, Literal, cast

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import (
    AbortRequested,
    BindingDigestMismatch,
    BindingUnavailable,
    StaleAttempt,
    StalePass,
)
from threadwarden.ledger.child_settled import lock_hosts, parent_host_of, record_child_settled_in
from threadwarden.ledger.messages import enqueue, message_id_for
from threadwarden.ledger.models import STABLE_WAITS, ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import (
    MINIMUM_ALARM_DELAY_MS,
    HistoryRecord,
    abort_reason,
    insert_record,
    record_statement,
    settle_now,
)
from threadwarden.views import FinalOutcome

HISTORY_LIMIT = 1_000
"""Most recent canonical records handed to a binding as thread history."""
CLAIMABLE = ("admitted", "ready", "input-applied", "running")
"""Head states a claim may take (``running`` only once its lease lapsed)."""


_CLAIM = """
WITH locked AS (
  SELECT h.pass_epoch, t.producer_epoch, t.next_record
    FROM threadwarden.hosts h JOIN threadwarden.threads t ON t.host_id = h.host_id
   WHERE h.host_id = $1 AND t.thread_id = $2
     FOR UPDATE OF h, t
), seen AS (
  SELECT next_record FROM threadwarden.threads WHERE thread_id = $2
), head AS (
  SELECT s.submission_id, s.state, s.agent_id, s.agent_digest, s.input, s.created_at,
         s.lease_expires_at > clock_timestamp() AS leased, s.parent_submission_id,
         $4::jsonb ->> s.agent_id AS worker_digest
    FROM threadwarden.submissions s
   WHERE s.thread_id = $2 AND s.state <> 'settled' AND EXISTS (SELECT 1 FROM locked)
   ORDER BY s.sequence LIMIT 1
), s AS (
  UPDATE threadwarden.submissions u
     SET state = 'running', agent_digest = head.worker_digest, epoch = l.producer_epoch + 1,
         attempt_id = $5, ownership_token = $6, attempts = u.attempts + 1,
         lease_expires_at = clock_timestamp() + make_interval(secs => $7::float8 / 1000)
    FROM head, locked l, seen
   WHERE u.submission_id = head.submission_id AND u.state = head.state
     AND head.submission_id = COALESCE($11, head.submission_id)
     AND l.next_record = seen.next_record
     AND l.pass_epoch = $3 AND head.state = ANY($8::text[])
     AND (u.lease_expires_at IS NULL OR u.lease_expires_at <= clock_timestamp())
     AND head.worker_digest IS NOT NULL
     AND (head.agent_digest IS NULL OR head.agent_digest = head.worker_digest)
  RETURNING u.submission_id, u.epoch, head.agent_id, u.abort_requested
), t AS (
  UPDATE threadwarden.threads SET producer_epoch = s.epoch FROM s WHERE thread_id = $2
)
SELECT (SELECT pass_epoch FROM locked) AS pass_epoch,
       (SELECT producer_epoch FROM locked) AS producer_epoch,
       (SELECT next_record FROM locked) IS DISTINCT FROM (SELECT next_record FROM seen)
         AS moved,
       (SELECT row_to_json(head) FROM head) AS head,
       CASE WHEN (SELECT pass_epoch FROM locked) IS NULL
            THEN (SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1) END AS host_epoch,
       (SELECT abort_requested FROM s) AS abort_requested,
       (SELECT json_agg(j ORDER BY j.sequence) FROM (
          SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
            FROM threadwarden.records r, s
           WHERE r.submission_id = s.submission_id AND r.step IS NOT NULL) j) AS journal,
       (SELECT json_agg(n ORDER BY n.sequence) FROM (
          SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
            FROM threadwarden.records r, s
           WHERE r.thread_id = $2 AND r.submission_id <> s.submission_id
             AND (NOT ($10::jsonb ? s.agent_id)
                  OR r.kind IN (SELECT jsonb_array_elements_text($10::jsonb -> s.agent_id)))
           ORDER BY r.sequence DESC LIMIT $9) n) AS history
"""
"""A claim in one statement (one round trip, no explicit transaction): lock the host and thread
rows (in that order), read the thread's head and, when it is claimable here (the pass is
current, the head is the submission the pass selected and is not leased, this worker has its
binding at its pinned digest), take it and bump the producer epoch; with the journal and
history of a taken head. What was read is returned either way, so the caller raises what
refused the claim. ``$4``: agent id → digest this worker runs; ``$10``: agent id → the only
record kinds its history loads; ``$11``: the selected submission.

The statement reads from the snapshot it started with, before its lock wait: when the thread's
record counter moved while it waited (``moved``: a record committed meanwhile), the journal it
would return may miss that record, so it takes nothing and the caller runs it again. The abort
request is returned by the update, from the row as locked."""
CLAIM_TRIES = 3
"""Claims run again when records committed during their lock wait (then the head is left)."""
_FENCE = """
WITH fence AS (
  SELECT 1 FROM threadwarden.hosts h, threadwarden.threads t, threadwarden.submissions s
   WHERE h.host_id = $1 AND h.pass_epoch = $2
     AND t.thread_id = $3 AND t.producer_epoch = $4
     AND s.submission_id = $5 AND s.ownership_token = $6 AND s.state = ANY($7::text[])
     AND NOT (s.abort_requested AND $8::boolean)
     FOR SHARE OF h FOR UPDATE OF t, s
)
"""
"""Everything an attempt's write depends on, checked and locked (host, thread, submission) in
the write's own statement: the pass epoch, the producer epoch, the ownership token and state,
and (for journal steps) no abort request. FOR SHARE on the host: writes of one pass do not
serialise on each other, but a new pass's begin waits for them."""
_APPEND = _FENCE + ", " + record_statement(9, guard="EXISTS (SELECT 1 FROM fence)")
_SETTLE = (
    _FENCE
    + """, fin AS (
  UPDATE threadwarden.submissions
     SET state = 'settled', outcome = $12::jsonb ->> 'outcome', reason = $12::jsonb ->> 'reason',
         settled_at = clock_timestamp(), ownership_token = NULL, lease_expires_at = NULL,
         reserved_outcome = NULL, reserved_result = NULL, reserved_reason = NULL
   WHERE submission_id = $5 AND EXISTS (SELECT 1 FROM fence)
), """
    + record_statement(9, guard="EXISTS (SELECT 1 FROM fence)")
)
_STOP = (
    _FENCE
    + """
UPDATE threadwarden.submissions SET state = $9, ownership_token = NULL, lease_expires_at = NULL
 WHERE submission_id = $5 AND EXISTS (SELECT 1 FROM fence)
RETURNING 1
"""
)


class Claim(BaseModel):
    """One attempt's ownership of a head: the fence every write of the attempt checks."""

    host_id: str
    pass_epoch: int
    thread_id: str
    submission_id: str
    agent_id: str
    agent_digest: str
    input: Any
    epoch: int
    attempt_id: str
    ownership_token: str
    history: list[HistoryRecord]
    """Thread records before this submission's first record (what the binding builds on)."""
    journal: list[HistoryRecord]
    """This submission's committed steps, replayed instead of repeated."""
    admitted_at: datetime | None = None
    """When the submission was admitted (for the submit-to-settle latency metric)."""
    parent_submission_id: str | None = None
    """The parent whose call this submission is (a child), if any."""
    abort_requested: bool = False
    """An operator asked to abort before this attempt began (a parent whose children must be
    aborted and joined first)."""


class Attempts:
    """Head claims and the writes of an attempt."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        *,
        lease_ms: int,
        minimum_alarm_delay_ms: int = MINIMUM_ALARM_DELAY_MS,
    ) -> None:
        self._pool = pool
        self._lease_ms = lease_ms
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def claim_head(
        self,
        host_id: str,
        pass_epoch: int,
        thread_id: str,
        *,
        bindings: dict[str, str],
        submission_id: str | None = None,
        history_kinds: dict[str, frozenset[str]] | None = None,
    ) -> Claim | None:
        """Claim the thread's head for a new attempt, or None when it is not claimable: it is
        not ``submission_id`` (the head the pass selected; None, for tests and tools: any head)
        or it cannot be taken now.

        ``history_kinds`` maps an agent id to the only record kinds its history loads (an
        agent not in it loads every kind).

        ``bindings`` maps agent id to the definition digest this worker can run. A head whose
        agent is missing or pinned to another digest raises `BindingUnavailable` or
        `BindingDigestMismatch` and the claim is released in the same transaction: the work
        stays pending and nothing is written.
        """
        attempt_id, token = f"att_{uuid.uuid4().hex}", secrets.token_hex(16)
        kinds = {agent: sorted(k) for agent, k in (history_kinds or {}).items()}
        found: asyncpg.Record | None = None
        for _ in range(CLAIM_TRIES):
            found = await self._pool.fetchrow(
                _CLAIM,
                host_id,
                thread_id,
                pass_epoch,
                bindings,
                attempt_id,
                token,
                self._lease_ms,
                list(CLAIMABLE),
                HISTORY_LIMIT,
                kinds,
                submission_id,
            )
            assert found is not None  # one row, always
            if not found["moved"]:
                break
        assert found is not None
        if found["pass_epoch"] is None:  # the thread is not (or no longer) this host's
            _raise_if_stale(host_id, pass_epoch, found["host_epoch"])
            return None
        _raise_if_stale(host_id, pass_epoch, found["pass_epoch"])
        head = found["head"]
        if head is None or submission_id not in (None, head["submission_id"]):
            return None  # the selected head settled or left: this pass claims no other
        if head["state"] not in CLAIMABLE or head["leased"]:
            return None
        digest = _binding_digest(head, bindings)
        if found["abort_requested"] is None:  # not taken: the head moved under us, or kept moving
            return None
        return Claim(
            host_id=host_id,
            pass_epoch=pass_epoch,
            thread_id=thread_id,
            submission_id=head["submission_id"],
            agent_id=head["agent_id"],
            agent_digest=digest,
            input=head["input"],
            epoch=int(found["producer_epoch"]) + 1,
            attempt_id=attempt_id,
            ownership_token=token,
            history=[HistoryRecord(**r) for r in found["history"] or []],
            journal=[HistoryRecord(**r) for r in found["journal"] or []],
            admitted_at=head.get("created_at"),
            parent_submission_id=head.get("parent_submission_id"),
            abort_requested=bool(found["abort_requested"]),
        )

    async def renew_lease(self, claim: Claim) -> bool:
        """Extend the lease while the attempt is alive; False once ownership is gone.

        Ownership is gone when the token changed or a newer pass began on the host: a zombie
        attempt must not keep a head leased.
        """
        status = await self._pool.execute(
            "UPDATE threadwarden.submissions"
            "   SET lease_expires_at = clock_timestamp() + make_interval(secs => $3::float8 / 1000)"
            " WHERE submission_id = $1 AND ownership_token = $2 AND state = 'running'"
            "   AND EXISTS (SELECT 1 FROM threadwarden.hosts"
            "                WHERE host_id = $4 AND pass_epoch = $5)",
            claim.submission_id,
            claim.ownership_token,
            self._lease_ms,
            claim.host_id,
            claim.pass_epoch,
        )
        return status.endswith(" 1")

    async def append(
        self,
        claim: Claim,
        kind: str,
        body: Any,
        *,
        step: int | None = None,
        honour_abort: bool = True,
    ) -> HistoryRecord:
        """Append one canonical record under the attempt's fence (a committed boundary).

        Raises `AbortRequested` (writing nothing) once an operator asked to abort, unless
        ``honour_abort`` is False: a tool call's result is recorded even then (what ran is never
        lost), and the abort lands at the next boundary.
        """
        sequence = await self._fenced(
            claim,
            _APPEND,
            [claim.thread_id, claim.submission_id, kind, body, claim.epoch, step],
            states=("running",),
            honour_abort=honour_abort,
        )
        return HistoryRecord(
            sequence=int(sequence),
            record_id=f"{claim.thread_id}:{sequence}",
            submission_id=claim.submission_id,
            kind=kind,
            body=body,
            step=step,
        )

    async def send_message(
        self,
        claim: Claim,
        *,
        step: int,
        thread_id: str,
        agent_id: str,
        input: Any,
        host_id: str | None,
    ) -> HistoryRecord:
        """Record a ``message-sent`` step and put the message in the host's outbox, together.

        The message id derives from the submission and the step, so a replayed step can
        neither send twice nor lose its message.
        """
        message_id = message_id_for(claim.submission_id, step)
        body = {
            "message_id": message_id,
            "to_thread": thread_id,
            "to_host": host_id,
            "agent_id": agent_id,
            "input": input,
        }
        async with self._pool.acquire() as conn, conn.transaction():
            await fence(conn, claim, states=("running",), honour_abort=True)
            record = await insert_record(
                conn,
                thread_id=claim.thread_id,
                submission_id=claim.submission_id,
                kind="message-sent",
                body=body,
                epoch=claim.epoch,
                step=step,
            )
            await enqueue(
                conn,
                message_id=message_id,
                source_host_id=claim.host_id,
                source_thread_id=claim.thread_id,
                source_submission_id=claim.submission_id,
                destination_thread_id=thread_id,
                destination_host_id=host_id,
                agent_id=agent_id,
                input=input,
            )
        return record

    async def reserve(
        self, claim: Claim, outcome: FinalOutcome, *, result: Any = None, reason: str | None = None
    ) -> None:
        """Settlement step 1: reserve the one outcome (``terminalizing``)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await fence(conn, claim, states=("running",), honour_abort=False)
            await conn.execute(
                "UPDATE threadwarden.submissions SET state = 'terminalizing',"
                " reserved_outcome = $2, reserved_result = COALESCE($3::jsonb, 'null'::jsonb),"
                " reserved_reason = $4 WHERE submission_id = $1",
                claim.submission_id,
                outcome,
                result,
                reason,
            )

    async def complete_settlement(self, claim: Claim) -> ChildSettled | None:
        """Settlement steps 2 and 3: append the reserved record, then finalize (``settled``);
        a child's settlement is recorded on its parent's host in the same transaction."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock_parent_host(conn, claim)
            row = await fence(conn, claim, states=("terminalizing",), honour_abort=False)
            return await settle_now(
                conn,
                thread_id=claim.thread_id,
                submission_id=claim.submission_id,
                outcome=row["reserved_outcome"],
                result=row["reserved_result"],
                reason=row["reserved_reason"],
                epoch=claim.epoch,
                minimum_alarm_delay_ms=self._minimum_alarm_delay_ms,
            )

    async def abort_reason(self, submission_id: str) -> str:
        """Why the submission is being aborted: an operator asked, or an ``if_busy="interrupt"``
        admission did (`threadwarden.ledger.records.abort_reason`)."""
        by = await self._pool.fetchval(
            "SELECT interrupted_by FROM threadwarden.submissions WHERE submission_id = $1",
            submission_id,
        )
        return abort_reason(by)

    async def settle(
        self, claim: Claim, outcome: FinalOutcome, *, result: Any = None, reason: str | None = None
    ) -> ChildSettled | None:
        """Reserve, append and finalize the submission's one settlement, in one statement.

        Atomic, so no reservation is ever left behind; `reserve` and `complete_settlement`
        remain the staged path recovery and operators finish. A child's settlement also records
        the child-settled marker on its parent's host, in the same transaction, and returns it
        (the caller wakes the parent's host).
        """
        body = {"outcome": outcome, "result": result, "reason": reason}
        args = [claim.thread_id, claim.submission_id, "settlement", body, claim.epoch, None]
        if claim.parent_submission_id is None:
            await self._fenced(claim, _SETTLE, args, states=("running",), honour_abort=False)
            return None
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock_parent_host(conn, claim)
            await _fenced_in(conn, claim, _SETTLE, args, states=("running",), honour_abort=False)
            return await record_child_settled_in(
                conn, claim.submission_id, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
            )

    async def _lock_parent_host(self, conn: Connection, claim: Claim) -> None:
        """For a child: both hosts, in byte order, before the attempt's own fence."""
        if claim.parent_submission_id is None:
            return
        parent_host = await parent_host_of(conn, claim.submission_id)
        if parent_host is not None:
            await lock_hosts(conn, (claim.host_id, parent_host))

    async def stop(self, claim: Claim, state: Literal["ready", "suspended", "unknown"]) -> None:
        """End the attempt without settling: yield (``ready``) or wait for a person."""
        await self._fenced(claim, _STOP, [state], states=("running",), honour_abort=False)

    async def _fenced(
        self,
        claim: Claim,
        statement: str,
        args: list[Any],
        *,
        states: tuple[str, ...],
        honour_abort: bool,
    ) -> Any:
        """Run ``statement`` (built on `_FENCE`) as one fenced round trip; when the fence does
        not hold nothing was written, and the check that failed is raised."""
        async with self._pool.acquire() as conn:
            return await _fenced_in(
                conn, claim, statement, args, states=states, honour_abort=honour_abort
            )

    async def hand_off(self, submission_id: str) -> None:
        """Route every later attempt of the submission to its agent's queue (an inline attempt
        ran past its budget). Unfenced: it decides where the head runs, nothing it holds."""
        await self._pool.execute(
            "UPDATE threadwarden.submissions SET handed_off = true WHERE submission_id = $1",
            submission_id,
        )

    async def release(self, claim: Claim) -> None:
        """Give the head back (ready again) after an attempt was cancelled; best effort."""
        await self._pool.execute(
            "UPDATE threadwarden.submissions SET state = 'ready', ownership_token = NULL,"
            " lease_expires_at = NULL"
            " WHERE submission_id = $1 AND ownership_token = $2 AND state = 'running'",
            claim.submission_id,
            claim.ownership_token,
        )


async def _fenced_in(
    conn: Connection,
    claim: Claim,
    statement: str,
    args: list[Any],
    *,
    states: tuple[str, ...],
    honour_abort: bool,
) -> Any:
    """`Attempts._fenced` on the caller's connection (inside its transaction, if any)."""
    checks = [
        claim.host_id,
        claim.pass_epoch,
        claim.thread_id,
        claim.epoch,
        claim.submission_id,
        claim.ownership_token,
        list(states),
        honour_abort,
    ]
    value = await conn.fetchval(statement, *checks, *args)
    if value is None:
        async with conn.transaction():  # explain the refusal; writes nothing
            await fence(conn, claim, states=states, honour_abort=honour_abort)
        raise StaleAttempt(
            f"submission {claim.submission_id}: attempt {claim.attempt_id} was fenced out"
        )
    return value


def _binding_digest(head: dict[str, Any], bindings: dict[str, str]) -> str:
    digest = bindings.get(head["agent_id"])
    if digest is None:
        raise BindingUnavailable(
            f"agent {head['agent_id']}: no binding registered on this worker"
            f" (submission {head['submission_id']} stays pending)",
            submission_id=head["submission_id"],
        )
    if head["agent_digest"] is not None and head["agent_digest"] != digest:
        raise BindingDigestMismatch(
            f"agent {head['agent_id']}: submission {head['submission_id']} is pinned to"
            f" digest {head['agent_digest']}, this worker has {digest}",
            submission_id=head["submission_id"],
        )
    return digest


def _raise_if_stale(host_id: str, pass_epoch: int, current: object) -> None:
    if current != pass_epoch:
        raise StalePass(f"host {host_id}: pass epoch {pass_epoch} is stale (current {current})")


_FENCE_ROW = """
SELECT h.pass_epoch, t.producer_epoch, s.ownership_token, s.state, s.abort_requested,
       s.reserved_outcome, s.reserved_result, s.reserved_reason
  FROM threadwarden.hosts h, threadwarden.threads t, threadwarden.submissions s
 WHERE h.host_id = $1 AND t.thread_id = $2 AND s.submission_id = $3
   FOR SHARE OF h FOR UPDATE OF t, s
"""
"""The rows an attempt's fence reads, locked in the order used everywhere (host, thread,
submission); `_FENCE` is the same check inside a write's own statement."""


async def fence(
    conn: Connection,
    claim: Claim,
    *,
    states: tuple[str, ...] = ("running",),
    honour_abort: bool,
) -> asyncpg.Record:
    """Lock and check everything an attempt's write depends on, in one statement; raise what
    failed (`StalePass`, `StaleAttempt`, `AbortRequested`); return the submission's row.

    Every fenced write that is not one statement (`Children`, `Checkpoints`, the settlement's
    steps) runs it first in its transaction; a one-statement write that `_FENCE` refused runs
    it to say why. FOR SHARE on the host: writes of one pass do not serialise on each other,
    but a new pass's begin (FOR UPDATE) waits for them and every write after it sees the new
    epoch."""
    row = await conn.fetchrow(_FENCE_ROW, claim.host_id, claim.thread_id, claim.submission_id)
    if row is None:
        raise StaleAttempt(f"submission {claim.submission_id}: no longer on its thread")
    _raise_if_stale(claim.host_id, claim.pass_epoch, row["pass_epoch"])
    if row["ownership_token"] != claim.ownership_token or row["state"] not in states:
        raise StaleAttempt(
            f"submission {claim.submission_id}: attempt {claim.attempt_id} no longer owns it"
        )
    if row["producer_epoch"] != claim.epoch:
        raise StaleAttempt(
            f"thread {claim.thread_id}: attempt epoch {claim.epoch} is stale"
            f" (current {row['producer_epoch']})"
        )
    if honour_abort and row["abort_requested"]:
        raise AbortRequested(f"submission {claim.submission_id}: an operator asked to abort")
    return cast(asyncpg.Record, row)


__all__ = ["STABLE_WAITS", "Attempts", "Claim", "HistoryRecord", "fence"]
