"""The writes of an attempt: fenced appends, messages, the stop and the staged settlement.

An attempt holds a `Claim` (`threadwarden.ledger.claims`). Every write of the attempt re-checks,
in its own transaction, the host's pass epoch, the submission's token and the thread's producer
epoch (`fence`, the one fence); a stale attempt writes nothing. Records carry the step of the
binding's journal, so a re-run attempt replays what was committed.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import asyncpg

from threadwarden.bindings import ThreadRecord
from threadwarden.errors import AbortRequested, StaleAttempt
from threadwarden.ledger.child_settled import lock_hosts, parent_host_of, record_child_settled_in
from threadwarden.ledger.claims import Claim, Claims, raise_if_stale
from threadwarden.ledger.messages import enqueue, message_id_for
from threadwarden.ledger.models import ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.records import (
    MINIMUM_ALARM_DELAY_MS,
    abort_reason,
    appended,
    insert_record,
    record_statement,
    settle_now,
)
from threadwarden.views import FinalOutcome

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


class Attempts(Claims):
    """Head claims (`Claims`) and the writes of an attempt."""

    def __init__(
        self,
        pool: asyncpg.Pool[Any],
        *,
        lease_ms: int,
        minimum_alarm_delay_ms: int = MINIMUM_ALARM_DELAY_MS,
    ) -> None:
        super().__init__(pool, lease_ms=lease_ms)
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def append(
        self,
        claim: Claim,
        kind: str,
        body: Any,
        *,
        step: int | None = None,
        honour_abort: bool = True,
    ) -> ThreadRecord:
        """Append one canonical record under the attempt's fence (a committed boundary).

        Raises `AbortRequested` (writing nothing) once an operator asked to abort, unless
        ``honour_abort`` is False: a tool call's result is recorded even then (what ran is never
        lost), and the abort lands at the next boundary.
        """
        sequence = await self._fenced(
            claim,
            _APPEND,
            [claim.thread_id, claim.submission_id, kind, body, claim.epoch, step],
            honour_abort=honour_abort,
        )
        return appended(claim.thread_id, int(sequence), claim.submission_id, kind, body, step)

    async def send_message(
        self,
        claim: Claim,
        *,
        step: int,
        thread_id: str,
        agent_id: str,
        input: Any,
        host_id: str | None,
    ) -> ThreadRecord:
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
            await fence(conn, claim, honour_abort=True)
            record = await append_in(conn, claim, "message-sent", body, step=step)
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
            await fence(conn, claim, honour_abort=False)
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
            await self._fenced(claim, _SETTLE, args, honour_abort=False)
            return None
        async with self._pool.acquire() as conn, conn.transaction():
            await self._lock_parent_host(conn, claim)
            await _fenced_in(conn, claim, _SETTLE, args, honour_abort=False)
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
        await self._fenced(claim, _STOP, [state], honour_abort=False)

    async def _fenced(
        self, claim: Claim, statement: str, args: list[Any], *, honour_abort: bool
    ) -> Any:
        """Run ``statement`` (built on `_FENCE`) as one fenced round trip of a running attempt;
        when the fence does not hold nothing was written, and the check that failed is raised."""
        async with self._pool.acquire() as conn:
            return await _fenced_in(conn, claim, statement, args, honour_abort=honour_abort)


async def _fenced_in(
    conn: Connection, claim: Claim, statement: str, args: list[Any], *, honour_abort: bool
) -> Any:
    """`Attempts._fenced` on the caller's connection (inside its transaction, if any)."""
    checks = [
        claim.host_id,
        claim.pass_epoch,
        claim.thread_id,
        claim.epoch,
        claim.submission_id,
        claim.ownership_token,
        ["running"],
        honour_abort,
    ]
    value = await conn.fetchval(statement, *checks, *args)
    if value is None:
        async with conn.transaction():  # explain the refusal; writes nothing
            await fence(conn, claim, honour_abort=honour_abort)
        raise StaleAttempt(
            f"submission {claim.submission_id}: attempt {claim.attempt_id} was fenced out"
        )
    return value


async def append_in(
    conn: Connection, claim: Claim, kind: str, body: Any, *, step: int | None = None
) -> ThreadRecord:
    """Append a record of the claim's submission inside the caller's transaction, which ran
    `fence` first (a fenced write of more than one statement)."""
    return await insert_record(
        conn,
        thread_id=claim.thread_id,
        submission_id=claim.submission_id,
        kind=kind,
        body=body,
        epoch=claim.epoch,
        step=step,
    )


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
    raise_if_stale(claim.host_id, claim.pass_epoch, row["pass_epoch"])
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
