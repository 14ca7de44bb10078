"""The mutation gate and admission.

Every native mutation is one transaction that applies the change, bumps ``hosts.dirty`` and
ensures the alarm (keeping an earlier one). The caller signals the host workflow after commit;
if it dies first, the durable ``alarm_at`` lets the sweeper converge the host.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Required, TypedDict, Unpack

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import HostMismatch, IdempotencyConflict, ThreadBusy
from threadwarden.ledger.aborts import interrupt
from threadwarden.ledger.pool import Connection
from threadwarden.validation import IfBusy, canonical_json
from threadwarden.views import OperatorResult, Receipt


def payload_digest(
    agent_id: str, agent_digest: str | None, value: Any, if_busy: IfBusy = "enqueue"
) -> str:
    """The digest an idempotency key is bound to (``if_busy`` counts when not the default)."""
    fields = {"agent_id": agent_id, "agent_digest": agent_digest, "input": value}
    if if_busy != "enqueue":
        fields["if_busy"] = if_busy
    return hashlib.sha256(canonical_json(fields).encode()).hexdigest()


KEY_READ = """
SELECT t.host_id AS owner, s.submission_id, s.sequence, s.payload_digest,
       CASE WHEN s.submission_id IS NOT NULL AND $3 THEN ARRAY(
         SELECT i.submission_id FROM threadwarden.submissions i
          WHERE i.interrupted_by = s.submission_id COLLATE "default"
            AND i.thread_id = q.thread_id
          ORDER BY i.sequence) END AS interrupted,
       CASE WHEN $3 THEN EXISTS (
         SELECT 1 FROM threadwarden.submissions b
          WHERE b.thread_id = q.thread_id AND b.state <> 'settled') END AS busy
  FROM (SELECT $1::text AS thread_id) q
  LEFT JOIN threadwarden.threads t ON t.thread_id = q.thread_id
  LEFT JOIN threadwarden.submissions s ON s.thread_id = q.thread_id AND s.idempotency_key = $2
"""
"""The thread's owner and the submission an idempotency key already names, if any; with ``$3``
(``if_busy`` other than ``enqueue``) also what that submission interrupted
(``submissions_interrupted``; compared in the column's default collation, as the ids are
``COLLATE "C"``, or no index serves it) and whether the thread has a submission that has not
settled (``submissions_lane``). An ``enqueue`` admission, the hot path, evaluates neither
subquery (a ``CASE`` runs a branch's subquery only when taken; only an ``interrupt``
admission ever sets ``interrupted_by``)."""
_LOCK_THREAD = "SELECT pg_advisory_xact_lock(hashtextextended('threadwarden:thread:' || $1, 0))"
"""Serialises ``reject`` and ``interrupt`` admissions of one thread (the thread's row may not
exist yet), so that two of them never both see it idle."""
_LOCK_HOST = "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE"
"""Then the thread's host row (when it exists), which every admission's write locks first:
an ``enqueue`` admission racing a ``reject`` either committed before its read or waits."""
_WRITE = """
WITH armed AS (
  SELECT clock_timestamp() + make_interval(secs => $11::float8 / 1000) AS at
), h AS (
  -- A new host starts dirty (1) and this mutation bumps it (2), as for an existing one.
  INSERT INTO threadwarden.hosts AS h (host_id, dirty, nonterminal, alarm_at)
  SELECT $1, 2, 1, at FROM armed
  ON CONFLICT (host_id) DO UPDATE
     SET dirty = h.dirty + 1, nonterminal = h.nonterminal + 1,
         alarm_at = LEAST(h.alarm_at, EXCLUDED.alarm_at), updated_at = clock_timestamp()
  RETURNING h.host_id, h.alarm_at < (SELECT at FROM armed) AS already_armed
), t AS (
  INSERT INTO threadwarden.threads AS t (thread_id, host_id, next_sequence)
  SELECT $2, host_id, 2 FROM h
  ON CONFLICT (thread_id) DO UPDATE SET next_sequence = t.next_sequence + 1
  RETURNING t.host_id, t.next_sequence - 1 AS sequence
), s AS (
  INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence, idempotency_key,
         payload_digest, agent_id, agent_digest, input, state, source_thread_id,
         source_message_id)
  SELECT $3, $2, sequence, $4, $5, $6, $7, COALESCE($8::jsonb, 'null'::jsonb), 'ready', $9, $10
    FROM t WHERE t.host_id = $1
  RETURNING sequence
)
SELECT (SELECT sequence FROM s) AS sequence, (SELECT already_armed FROM h) AS already_armed
"""
"""The mutation gate for one admission, in one statement: lock the host (hosts, then threads,
then submissions, the lock order everywhere), bump its generation and nonterminal count, ensure
its alarm (reporting whether an alarm at least as early was already armed, so the caller can
skip a redundant wake), take the thread's next sequence and insert the submission."""


class MessageSource(BaseModel):
    """Where an accepted message came from."""

    thread_id: str
    message_id: str


class AdmissionRequest(TypedDict, total=False):
    """What an admission asks: the thread, the agent and its input; optionally the host (the
    thread's, or the thread id for a new thread), the agent's pinned digest, the message it was
    accepted from, and what it does on a busy thread (``if_busy``, default ``enqueue``)."""

    thread_id: Required[str]
    agent_id: Required[str]
    input: Required[Any]
    host_id: str | None
    agent_digest: str | None
    source: MessageSource | None
    if_busy: IfBusy


class Admissions:
    """Admits submissions onto threads, idempotently per (thread, key)."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def admit(
        self, *, idempotency_key: str | None = None, **request: Unpack[AdmissionRequest]
    ) -> Receipt:
        """Admit one submission; the same key and payload return the same receipt.

        ``source`` links a submission accepted from another thread's message back to it;
        ``if_busy`` says what it does when the thread has one that has not settled (`IfBusy`).

        Raises `IdempotencyConflict` when the key was used for a different payload,
        `HostMismatch` when the thread belongs to another host and `ThreadBusy` for a ``reject``
        on a busy thread. Either way nothing is written.
        """
        digest = payload_digest(
            request["agent_id"],
            request.get("agent_digest"),
            request["input"],
            request.get("if_busy", "enqueue"),
        )
        key = idempotency_key or f"auto:{uuid.uuid4().hex}"
        for last_try in (False, True):
            try:
                async with self._pool.acquire() as conn, conn.transaction():
                    return await self.admit_in(conn, key=key, digest=digest, **request)
            except asyncpg.UniqueViolationError:
                # A concurrent admission took the same key first: read its receipt instead.
                if last_try:
                    raise
        raise AssertionError("unreachable")

    async def admit_in(
        self, conn: Connection, *, key: str, digest: str, **request: Unpack[AdmissionRequest]
    ) -> Receipt:
        """`admit` inside the caller's transaction: one read, then one write (``reject`` and
        ``interrupt`` first take the thread's admission lock; ``interrupt`` asks the earlier
        submissions to abort before the write)."""
        thread_id, if_busy = request["thread_id"], request.get("if_busy", "enqueue")
        if if_busy != "enqueue":
            await conn.execute(_LOCK_THREAD, thread_id)
        checks = if_busy != "enqueue"
        found = await conn.fetchrow(KEY_READ, thread_id, key, checks)
        assert found is not None
        owner = found["owner"]
        host = request.get("host_id") or owner or thread_id
        if if_busy != "enqueue" and owner is not None:
            await conn.execute(_LOCK_HOST, owner)
            found = await conn.fetchrow(KEY_READ, thread_id, key, checks)  # as of the lock
            assert found is not None
        if owner is not None and owner != host:
            raise HostMismatch(f"host: thread {thread_id} belongs to host {owner}, not {host}")
        if found["submission_id"] is not None:
            if found["payload_digest"] != digest:
                raise IdempotencyConflict(
                    f"idempotency_key: {key!r} was already used on thread {thread_id}"
                    " for a different payload"
                )
            return Receipt(
                submission_id=found["submission_id"],
                thread_id=thread_id,
                host_id=host,
                sequence=found["sequence"],
                created=False,
                wake=False,
                interrupted=list(found["interrupted"] or []),
            )
        if if_busy == "reject" and found["busy"]:
            raise ThreadBusy(
                f"thread: {thread_id} has a submission that has not settled (if_busy reject)"
            )
        submission_id = f"sub_{uuid.uuid4().hex}"
        interrupted: list[OperatorResult] = []
        if if_busy == "interrupt" and found["busy"]:
            interrupted = await interrupt(
                conn, thread_id, submission_id, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
            )
        source = request.get("source")
        written = await conn.fetchrow(
            _WRITE,
            host,
            thread_id,
            submission_id,
            key,
            digest,
            request["agent_id"],
            request.get("agent_digest"),
            request["input"],
            source.thread_id if source else None,
            source.message_id if source else None,
            self._minimum_alarm_delay_ms,
        )
        if written is None or written["sequence"] is None:  # created meanwhile, for another host
            raise HostMismatch(f"host: thread {thread_id} belongs to another host than {host}")
        return Receipt(
            submission_id=submission_id,
            thread_id=thread_id,
            host_id=host,
            sequence=int(written["sequence"]),
            created=True,
            wake=not written["already_armed"] or bool(interrupted),
            interrupted=[result.submission_id for result in interrupted],
            parent_hosts=sorted({r.parent_host_id for r in interrupted if r.parent_host_id}),
        )
