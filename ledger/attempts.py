"""Claims, fenced appends and settlement of a thread's head.

A claim bumps the thread's producer epoch and mints an attempt id and ownership token with a
lease. Every later write of the attempt re-checks, in its own transaction, the host's pass epoch,
the submission's token and the thread's producer epoch; a stale attempt writes nothing.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import asyncpg
from pydantic import BaseModel

from ledger.models import STABLE_WAITS, Outcome
from ledger.pool import Connection
from threadwarden.errors import BindingDigestMismatch, BindingUnavailable, StaleAttempt, StalePass

HISTORY_LIMIT = 1_000
"""Most recent canonical records handed to a binding as thread history."""


class HistoryRecord(BaseModel):
    sequence: int
    record_id: str
    submission_id: str
    kind: str
    body: Any


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
            if head is None or head["state"] in STABLE_WAITS or head["leased"]:
                return None
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
            epoch = int(thread["producer_epoch"]) + 1
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
                history=await _history(conn, thread_id),
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

    async def append(self, claim: Claim, kind: str, body: Any) -> HistoryRecord:
        """Append one canonical record under the attempt's fence."""
        async with self._pool.acquire() as conn, conn.transaction():
            return await _fenced_append(conn, claim, kind, body)

    async def settle(
        self, claim: Claim, outcome: Outcome, *, result: Any = None, reason: str | None = None
    ) -> HistoryRecord:
        """Record the one settlement of the submission and advance the lane, atomically."""
        body = {"outcome": outcome, "result": result, "reason": reason}
        async with self._pool.acquire() as conn, conn.transaction():
            record = await _fenced_append(conn, claim, "settlement", body)
            await conn.execute(
                "UPDATE threadwarden.submissions SET state = 'settled', outcome = $2, reason = $3,"
                " settled_at = clock_timestamp(), ownership_token = NULL, lease_expires_at = NULL"
                " WHERE submission_id = $1",
                claim.submission_id,
                outcome,
                reason,
            )
            return record

    async def release(self, claim: Claim) -> None:
        """Give the head back (ready again) after an attempt stopped without settling."""
        await self._pool.execute(
            "UPDATE threadwarden.submissions SET state = 'ready', ownership_token = NULL,"
            " lease_expires_at = NULL"
            " WHERE submission_id = $1 AND ownership_token = $2 AND state = 'running'",
            claim.submission_id,
            claim.ownership_token,
        )


_PASS_EPOCH = {
    "FOR UPDATE": "SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE",
    "FOR SHARE": "SELECT pass_epoch FROM threadwarden.hosts WHERE host_id = $1 FOR SHARE",
}


async def _check_pass(conn: Connection, host_id: str, pass_epoch: int, *, lock: str) -> None:
    current = await conn.fetchval(_PASS_EPOCH[lock], host_id)
    if current != pass_epoch:
        raise StalePass(f"host {host_id}: pass epoch {pass_epoch} is stale (current {current})")


async def _history(conn: Connection, thread_id: str) -> list[HistoryRecord]:
    rows = await conn.fetch(
        "SELECT sequence, record_id, submission_id, kind, body FROM ("
        "  SELECT * FROM threadwarden.records WHERE thread_id = $1"
        "  ORDER BY sequence DESC LIMIT $2) newest ORDER BY sequence",
        thread_id,
        HISTORY_LIMIT,
    )
    return [HistoryRecord(**dict(r)) for r in rows]


async def _fenced_append(conn: Connection, claim: Claim, kind: str, body: Any) -> HistoryRecord:
    # FOR SHARE: appends of one pass do not serialise on each other, but a new pass's begin
    # (FOR UPDATE) waits for them and every append after it sees the new epoch.
    await _check_pass(conn, claim.host_id, claim.pass_epoch, lock="FOR SHARE")
    owner = await conn.fetchrow(
        "SELECT ownership_token, state FROM threadwarden.submissions"
        " WHERE submission_id = $1 FOR UPDATE",
        claim.submission_id,
    )
    if (
        owner is None
        or owner["ownership_token"] != claim.ownership_token
        or owner["state"] != "running"
    ):
        raise StaleAttempt(
            f"submission {claim.submission_id}: attempt {claim.attempt_id} no longer owns it"
        )
    thread = await conn.fetchrow(
        "SELECT producer_epoch, next_record FROM threadwarden.threads"
        " WHERE thread_id = $1 FOR UPDATE",
        claim.thread_id,
    )
    assert thread is not None
    if int(thread["producer_epoch"]) != claim.epoch:
        raise StaleAttempt(
            f"thread {claim.thread_id}: attempt epoch {claim.epoch} is stale"
            f" (current {thread['producer_epoch']})"
        )
    sequence = int(thread["next_record"])
    record_id = f"{claim.thread_id}:{sequence}"
    await conn.execute(
        "INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id, kind,"
        " body, epoch) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        claim.thread_id,
        sequence,
        record_id,
        claim.submission_id,
        kind,
        body,
        claim.epoch,
    )
    await conn.execute(
        "UPDATE threadwarden.threads SET next_record = next_record + 1 WHERE thread_id = $1",
        claim.thread_id,
    )
    return HistoryRecord(
        sequence=sequence,
        record_id=record_id,
        submission_id=claim.submission_id,
        kind=kind,
        body=body,
    )
