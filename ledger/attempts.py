"""Claims, fenced appends and the staged settlement of a thread's head.

A claim bumps the thread's producer epoch and mints an attempt id and ownership token with a
lease. Every later write of the attempt re-checks, in its own transaction, the host's pass epoch,
the submission's token and the thread's producer epoch; a stale attempt writes nothing. Records
carry the step of the binding's journal, so a re-run attempt replays what was committed.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any, Literal, cast

import asyncpg
from pydantic import BaseModel

from ledger.messages import enqueue, message_id_for
from ledger.models import STABLE_WAITS, Outcome
from ledger.pool import Connection
from ledger.records import HistoryRecord, insert_record, journal, settle_now
from threadwarden.errors import (
    AbortRequested,
    BindingDigestMismatch,
    BindingUnavailable,
    StaleAttempt,
    StalePass,
)

HISTORY_LIMIT = 1_000
"""Most recent canonical records handed to a binding as thread history."""
CLAIMABLE = ("admitted", "ready", "input-applied", "running")
"""Head states a claim may take (``running`` only once its lease lapsed)."""


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


class Attempts:
    """Head claims and the writes of an attempt."""

    def __init__(self, pool: asyncpg.Pool[Any], *, lease_ms: int) -> None:
        self._pool = pool
        self._lease_ms = lease_ms

    async def claim_head(
        self, host_id: str, pass_epoch: int, thread_id: str, *, bindings: dict[str, str]
    ) -> Claim | None:
        """Claim the thread's head for a new attempt, or None when it is not claimable.

        ``bindings`` maps agent id to the definition digest this worker can run. A head whose
        agent is missing or pinned to another digest raises `BindingUnavailable` or
        `BindingDigestMismatch` and the claim is released in the same transaction: the work
        stays pending and nothing is written.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await _check_pass(conn, host_id, pass_epoch, lock="FOR UPDATE")
            thread = await conn.fetchrow(
                "SELECT producer_epoch FROM threadwarden.threads"
                " WHERE thread_id = $1 AND host_id = $2 FOR UPDATE",
                thread_id,
                host_id,
            )
            if thread is None:
                return None
            head = await conn.fetchrow(
                "SELECT submission_id, state, agent_id, agent_digest, input,"
                "       lease_expires_at > clock_timestamp() AS leased"
                "  FROM threadwarden.submissions WHERE thread_id = $1 AND state <> 'settled'"
                " ORDER BY sequence LIMIT 1 FOR UPDATE",
                thread_id,
            )
            if head is None or head["state"] not in CLAIMABLE or head["leased"]:
                return None
            digest = _binding_digest(head, bindings)
            epoch = int(thread["producer_epoch"]) + 1
            steps = await journal(conn, head["submission_id"])
            claim = Claim(
                host_id=host_id,
                pass_epoch=pass_epoch,
                thread_id=thread_id,
                submission_id=head["submission_id"],
                agent_id=head["agent_id"],
                agent_digest=digest,
                input=head["input"],
                epoch=epoch,
                attempt_id=f"att_{uuid.uuid4().hex}",
                ownership_token=secrets.token_hex(16),
                history=await _history(conn, thread_id, head["submission_id"]),
                journal=steps,
            )
            await conn.execute(
                "UPDATE threadwarden.threads SET producer_epoch = $2 WHERE thread_id = $1",
                thread_id,
                epoch,
            )
            await conn.execute(
                "UPDATE threadwarden.submissions SET state = 'running', agent_digest = $2,"
                " epoch = $3, attempt_id = $4, ownership_token = $5, attempts = attempts + 1,"
                " lease_expires_at = clock_timestamp() + make_interval(secs => $6::float8 / 1000)"
                " WHERE submission_id = $1",
                claim.submission_id,
                digest,
                epoch,
                claim.attempt_id,
                claim.ownership_token,
                self._lease_ms,
            )
        return claim

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
        self, claim: Claim, kind: str, body: Any, *, step: int | None = None
    ) -> HistoryRecord:
        """Append one canonical record under the attempt's fence (a committed boundary).

        Raises `AbortRequested` (writing nothing) once an operator asked to abort.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            await _fence(conn, claim, states=("running",), honour_abort=True)
            return await insert_record(
                conn,
                thread_id=claim.thread_id,
                submission_id=claim.submission_id,
                kind=kind,
                body=body,
                epoch=claim.epoch,
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
            await _fence(conn, claim, states=("running",), honour_abort=True)
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
        self, claim: Claim, outcome: Outcome, *, result: Any = None, reason: str | None = None
    ) -> None:
        """Settlement step 1: reserve the one outcome (``terminalizing``)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await _fence(conn, claim, states=("running",), honour_abort=False)
            await conn.execute(
                "UPDATE threadwarden.submissions SET state = 'terminalizing',"
                " reserved_outcome = $2, reserved_result = COALESCE($3::jsonb, 'null'::jsonb),"
                " reserved_reason = $4 WHERE submission_id = $1",
                claim.submission_id,
                outcome,
                result,
                reason,
            )

    async def complete_settlement(self, claim: Claim) -> None:
        """Settlement steps 2 and 3: append the reserved record, then finalize (``settled``)."""
        async with self._pool.acquire() as conn, conn.transaction():
            row = await _fence(conn, claim, states=("terminalizing",), honour_abort=False)
            await settle_now(
                conn,
                thread_id=claim.thread_id,
                submission_id=claim.submission_id,
                outcome=row["reserved_outcome"],
                result=row["reserved_result"],
                reason=row["reserved_reason"],
                epoch=claim.epoch,
            )

    async def settle(
        self, claim: Claim, outcome: Outcome, *, result: Any = None, reason: str | None = None
    ) -> None:
        """Reserve, append and finalize the submission's one settlement (two transactions)."""
        await self.reserve(claim, outcome, result=result, reason=reason)
        await self.complete_settlement(claim)

    async def stop(self, claim: Claim, state: Literal["ready", "suspended", "unknown"]) -> None:
        """End the attempt without settling: yield (``ready``) or wait for a person."""
        async with self._pool.acquire() as conn, conn.transaction():
            await _fence(conn, claim, states=("running",), honour_abort=False)
            await conn.execute(
                "UPDATE threadwarden.submissions SET state = $2, ownership_token = NULL,"
                " lease_expires_at = NULL WHERE submission_id = $1",
                claim.submission_id,
                state,
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


def _binding_digest(head: asyncpg.Record, bindings: dict[str, str]) -> str:
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


_PASS_EPOCH = {
    "FOR UPDATE": "SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE",
    "FOR SHARE": "SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1 FOR SHARE",
}


async def _check_pass(conn: Connection, host_id: str, pass_epoch: int, *, lock: str) -> None:
    current = await conn.fetchval(_PASS_EPOCH[lock], host_id)
    if current != pass_epoch:
        raise StalePass(f"host {host_id}: pass epoch {pass_epoch} is stale (current {current})")


async def _history(conn: Connection, thread_id: str, submission_id: str) -> list[HistoryRecord]:
    rows = await conn.fetch(
        "SELECT sequence, record_id, submission_id, kind, body, step FROM ("
        "  SELECT * FROM threadwarden.records WHERE thread_id = $1 AND submission_id <> $3"
        "  ORDER BY sequence DESC LIMIT $2) newest ORDER BY sequence",
        thread_id,
        HISTORY_LIMIT,
        submission_id,
    )
    return [HistoryRecord(**dict(r)) for r in rows]


async def _fence(
    conn: Connection, claim: Claim, *, states: tuple[str, ...], honour_abort: bool
) -> asyncpg.Record:
    """Lock and check everything an attempt's write depends on; return the submission row."""
    # FOR SHARE: writes of one pass do not serialise on each other, but a new pass's begin
    # (FOR UPDATE) waits for them and every write after it sees the new epoch.
    await _check_pass(conn, claim.host_id, claim.pass_epoch, lock="FOR SHARE")
    row = await conn.fetchrow(
        "SELECT ownership_token, state, abort_requested, reserved_outcome, reserved_result,"
        "       reserved_reason FROM threadwarden.submissions WHERE submission_id = $1 FOR UPDATE",
        claim.submission_id,
    )
    if row is None or row["ownership_token"] != claim.ownership_token or row["state"] not in states:
        raise StaleAttempt(
            f"submission {claim.submission_id}: attempt {claim.attempt_id} no longer owns it"
        )
    producer_epoch = await conn.fetchval(
        "SELECT producer_epoch FROM threadwarden.threads WHERE thread_id = $1 FOR UPDATE",
        claim.thread_id,
    )
    if int(producer_epoch) != claim.epoch:
        raise StaleAttempt(
            f"thread {claim.thread_id}: attempt epoch {claim.epoch} is stale"
            f" (current {producer_epoch})"
        )
    if honour_abort and row["abort_requested"]:
        raise AbortRequested(f"submission {claim.submission_id}: an operator asked to abort")
    return cast(asyncpg.Record, row)


__all__ = ["STABLE_WAITS", "Attempts", "Claim", "HistoryRecord"]
