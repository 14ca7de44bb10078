"""The mutation gate and admission.

Every native mutation is one transaction that applies the change, bumps ``hosts.dirty`` and
ensures the alarm (keeping an earlier one). The caller signals the host workflow after commit;
if it dies first, the durable ``alarm_at`` lets the sweeper converge the host.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import asyncpg
from pydantic import BaseModel

from ledger.models import Receipt
from ledger.pool import Connection
from threadwarden.errors import HostMismatch, IdempotencyConflict
from threadwarden.validation import canonical_json

# Lock order everywhere: hosts, then threads, then submissions.
_ENSURE_HOST = "INSERT INTO threadwarden.hosts (host_id) VALUES ($1) ON CONFLICT DO NOTHING"
_MARK_DIRTY = """
UPDATE threadwarden.hosts
   SET dirty = dirty + CASE WHEN $2 THEN 1 ELSE 0 END,
       alarm_at = LEAST(alarm_at, clock_timestamp() + make_interval(secs => $3::float8 / 1000)),
       updated_at = clock_timestamp()
 WHERE host_id = $1
RETURNING dirty
"""


async def mark_dirty(
    conn: Connection,
    host_id: str,
    *,
    minimum_alarm_delay_ms: int,
    invalidates_recovery: bool = True,
) -> int:
    """Inside a mutation's transaction: bump the generation and ensure-by the alarm.

    Receipt-only bookkeeping passes ``invalidates_recovery=False``: it arms the alarm without
    making the host dirty.
    """
    dirty = await conn.fetchval(_MARK_DIRTY, host_id, invalidates_recovery, minimum_alarm_delay_ms)
    return int(dirty)


def payload_digest(agent_id: str, agent_digest: str | None, value: Any) -> str:
    """The digest an idempotency key is bound to."""
    body = canonical_json({"agent_id": agent_id, "agent_digest": agent_digest, "input": value})
    return hashlib.sha256(body.encode()).hexdigest()


class MessageSource(BaseModel):
    """Where an accepted message came from."""

    thread_id: str
    message_id: str


class Admissions:
    """Admits submissions onto threads, idempotently per (thread, key)."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def admit(
        self,
        *,
        thread_id: str,
        agent_id: str,
        input: Any,
        host_id: str | None = None,
        idempotency_key: str | None = None,
        agent_digest: str | None = None,
        source: MessageSource | None = None,
    ) -> Receipt:
        """Admit one submission; the same key and payload return the same receipt.

        ``source`` links a submission accepted from another thread's message back to it.

        Raises `IdempotencyConflict` when the key was used for a different payload and
        `HostMismatch` when the thread belongs to another host. Either way nothing is written.
        """
        digest = payload_digest(agent_id, agent_digest, input)
        key = idempotency_key or f"auto:{uuid.uuid4().hex}"
        async with self._pool.acquire() as conn, conn.transaction():
            return await self.admit_in(
                conn,
                thread_id=thread_id,
                agent_id=agent_id,
                input=input,
                host_id=host_id,
                key=key,
                digest=digest,
                agent_digest=agent_digest,
                source=source,
            )

    async def admit_in(
        self,
        conn: Connection,
        *,
        thread_id: str,
        agent_id: str,
        input: Any,
        host_id: str | None,
        key: str,
        digest: str,
        agent_digest: str | None,
        source: MessageSource | None,
    ) -> Receipt:
        """`admit` inside the caller's transaction."""
        owner = await conn.fetchval(
            "SELECT host_id FROM threadwarden.threads WHERE thread_id = $1", thread_id
        )
        host = host_id or owner or thread_id
        if owner is not None and owner != host:
            raise HostMismatch(f"host: thread {thread_id} belongs to host {owner}, not {host}")
        await conn.execute(_ENSURE_HOST, host)
        await conn.execute("SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE", host)
        await conn.execute(
            "INSERT INTO threadwarden.threads (thread_id, host_id) VALUES ($1, $2)"
            " ON CONFLICT DO NOTHING",
            thread_id,
            host,
        )
        thread = await conn.fetchrow(
            "SELECT host_id, next_sequence FROM threadwarden.threads"
            " WHERE thread_id = $1 FOR UPDATE",
            thread_id,
        )
        assert thread is not None
        if thread["host_id"] != host:  # another admission created it concurrently
            raise HostMismatch(
                f"host: thread {thread_id} belongs to host {thread['host_id']}, not {host}"
            )
        existing = await conn.fetchrow(
            "SELECT submission_id, sequence, payload_digest FROM threadwarden.submissions"
            " WHERE thread_id = $1 AND idempotency_key = $2",
            thread_id,
            key,
        )
        if existing is not None:
            if existing["payload_digest"] != digest:
                raise IdempotencyConflict(
                    f"idempotency_key: {key!r} was already used on thread {thread_id}"
                    " for a different payload"
                )
            return Receipt(
                submission_id=existing["submission_id"],
                thread_id=thread_id,
                host_id=host,
                sequence=existing["sequence"],
                created=False,
            )
        sequence = int(thread["next_sequence"])
        submission_id = f"sub_{uuid.uuid4().hex}"
        await conn.execute(
            "INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence,"
            " idempotency_key, payload_digest, agent_id, agent_digest, input, state,"
            " source_thread_id, source_message_id)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8::jsonb, 'null'::jsonb), 'ready',"
            " $9, $10)",
            submission_id,
            thread_id,
            sequence,
            key,
            digest,
            agent_id,
            agent_digest,
            input,
            source.thread_id if source else None,
            source.message_id if source else None,
        )
        await conn.execute(
            "UPDATE threadwarden.threads SET next_sequence = next_sequence + 1"
            " WHERE thread_id = $1",
            thread_id,
        )
        await conn.execute(
            "UPDATE threadwarden.hosts SET nonterminal = nonterminal + 1 WHERE host_id = $1",
            host,
        )
        await mark_dirty(conn, host, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms)
        return Receipt(
            submission_id=submission_id,
            thread_id=thread_id,
            host_id=host,
            sequence=sequence,
            created=True,
        )
