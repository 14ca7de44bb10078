"""Messages between threads: the source host's outbox, delivery claims, acceptance, receipts.

A binding's message enters its source host's outbox in the attempt's transaction. Delivery
claims a due message (pushing ``not_before`` to the claim's deadline, so an abandoned claim
comes due again by itself), admits it at the destination thread as an ordinary native mutation
whose idempotency key is the message id, and records the receipt in that same transaction: a
message is accepted at most once whatever crashes, timeouts or duplicate deliveries happen. A
failed or timed-out delivery persists its retry with backoff before the driver moves on.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import HostMismatch, IdempotencyConflict, InvalidInput
from threadwarden.ledger.admission import Admissions, MessageSource, payload_digest
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.publication import (  # the outboxes back off alike
    RETRY_BASE_MS,
    RETRY_CAP_MS,
)
from threadwarden.views import Receipt

DELIVERY_BATCH = 10
"""Messages one delivery activity claims at most, one after another. The batch is where delivery
stops once the pass's native work finished: the join of the running batch is bounded by the
batch's claim deadlines, and what is left stays due (the pass's finish rearms for it)."""

PERMANENT = (HostMismatch, IdempotencyConflict, InvalidInput)
"""Errors no retry can fix: the message is marked ``rejected`` (visible, never lost)."""

CLAIM = """
UPDATE threadwarden.messages m
   SET claim_token = $3, attempts = attempts + 1,
       not_before = clock_timestamp() + make_interval(secs => $2::float8 / 1000)
 WHERE message_id = (
        SELECT message_id FROM threadwarden.messages
         WHERE source_host_id = $1 AND state = 'pending' AND not_before <= clock_timestamp()
         ORDER BY not_before, message_id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING message_id, source_thread_id, destination_thread_id, destination_host_id, agent_id,
          input, attempts, not_before AS claim_deadline
"""


class Message(BaseModel):
    """One message between threads, as the source's outbox holds it."""

    message_id: str
    source_thread_id: str
    destination_thread_id: str
    destination_host_id: str | None
    agent_id: str
    input: Any
    state: str = "pending"
    attempts: int = 0
    destination_submission_id: str | None = None
    last_error: str | None = None


class DeliveryClaim(BaseModel):
    """A claimed message: only this token may record its receipt or its retry."""

    message: Message
    token: str
    deadline: datetime


def message_id_for(submission_id: str, step: int) -> str:
    """The deterministic id of the message a submission's journal step sends."""
    return f"msg_{submission_id.removeprefix('sub_')}_{step}"


async def enqueue(
    conn: Connection,
    *,
    message_id: str,
    source_host_id: str,
    source_thread_id: str,
    source_submission_id: str,
    destination_thread_id: str,
    destination_host_id: str | None,
    agent_id: str,
    input: Any,
) -> None:
    """Inside the sending attempt's transaction: put the message in the source's outbox."""
    await conn.execute(
        "INSERT INTO threadwarden.messages (message_id, source_host_id, source_thread_id,"
        " source_submission_id, destination_thread_id, destination_host_id, agent_id, input)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8::jsonb, 'null'::jsonb))",
        message_id,
        source_host_id,
        source_thread_id,
        source_submission_id,
        destination_thread_id,
        destination_host_id,
        agent_id,
        input,
    )


async def pending_deadline(conn: Connection, host_id: str) -> datetime | None:
    """When the host's next pending message is due (a claimed one: its claim deadline)."""
    value = await conn.fetchval(
        "SELECT min(not_before) FROM threadwarden.messages"
        " WHERE source_host_id = $1 AND state = 'pending'",
        host_id,
    )
    return value if isinstance(value, datetime) else None


class Messages:
    """Claims, acceptance with receipt, and persisted retries of a host's outgoing messages."""

    def __init__(self, pool: asyncpg.Pool[Any], admissions: Admissions) -> None:
        self._pool = pool
        self._admissions = admissions

    async def claim_due(self, host_id: str, *, claim_timeout_ms: int) -> DeliveryClaim | None:
        """Claim the host's earliest due message until ``now + claim_timeout_ms``."""
        token = secrets.token_hex(16)
        row = await self._pool.fetchrow(CLAIM, host_id, claim_timeout_ms, token)
        if row is None:
            return None
        fields = dict(row)
        deadline = fields.pop("claim_deadline")
        return DeliveryClaim(message=Message(**fields), token=token, deadline=deadline)

    async def accept(self, claim: DeliveryClaim) -> Receipt | None:
        """Admit the message at its destination and record the receipt, in one transaction.

        Idempotent by message id: a duplicate delivery returns the first acceptance's receipt.
        None when the claim was lost (a later claim replaced it) and the message is not yet
        accepted, or the message was rejected: this delivery must not write.
        """
        message = claim.message
        async with self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT state, claim_token, destination_submission_id FROM threadwarden.messages"
                " WHERE message_id = $1 FOR UPDATE",
                message.message_id,
            )
            if row is None or row["state"] == "rejected":
                return None
            if row["state"] == "pending" and row["claim_token"] != claim.token:
                return None
            receipt = await self._admissions.admit_in(
                conn,
                thread_id=message.destination_thread_id,
                agent_id=message.agent_id,
                input=message.input,
                host_id=message.destination_host_id,
                key=f"message:{message.message_id}",
                digest=payload_digest(message.agent_id, None, message.input),
                agent_digest=None,
                source=MessageSource(
                    thread_id=message.source_thread_id, message_id=message.message_id
                ),
            )
            await conn.execute(
                "UPDATE threadwarden.messages SET state = 'delivered', claim_token = NULL,"
                " destination_submission_id = $2, destination_host_id = $3, last_error = NULL,"
                " delivered_at = COALESCE(delivered_at, clock_timestamp())"
                " WHERE message_id = $1",
                message.message_id,
                receipt.submission_id,
                receipt.host_id,
            )
        return receipt

    async def retry_later(self, claim: DeliveryClaim, error: str) -> None:
        """Persist a failed or timed-out delivery: due again after the backoff."""
        await self._pool.execute(
            "UPDATE threadwarden.messages SET claim_token = NULL, last_error = $3,"
            " not_before = clock_timestamp() + make_interval(secs =>"
            "   LEAST($4::float8, $5::float8 * 2 ^ (attempts - 1)) / 1000)"
            " WHERE message_id = $1 AND claim_token = $2 AND state = 'pending'",
            claim.message.message_id,
            claim.token,
            error[:500],
            RETRY_CAP_MS,
            RETRY_BASE_MS,
        )

    async def reject(self, claim: DeliveryClaim, error: str) -> None:
        """A permanent refusal (the destination thread belongs to another host, …)."""
        await self._pool.execute(
            "UPDATE threadwarden.messages SET state = 'rejected', claim_token = NULL,"
            " last_error = $3 WHERE message_id = $1 AND claim_token = $2 AND state = 'pending'",
            claim.message.message_id,
            claim.token,
            error[:500],
        )

    async def sent_by(self, thread_id: str) -> list[Message]:
        """Messages a thread sent, oldest first (for status and tests)."""
        rows = await self._pool.fetch(
            "SELECT message_id, source_thread_id, destination_thread_id, destination_host_id,"
            "       agent_id, input, state, attempts, destination_submission_id, last_error"
            "  FROM threadwarden.messages WHERE source_thread_id = $1"
            " ORDER BY created_at, message_id",
            thread_id,
        )
        return [Message(**dict(r)) for r in rows]
