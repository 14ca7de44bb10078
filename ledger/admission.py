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
from threadwarden.ledger.gate import host_gate
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
settled (``submissions_lane``): the read of a ``reject`` or ``interrupt`` admission (an
``enqueue`` admission reads in `ENQUEUE`, neither subquery: only an ``interrupt`` admission
ever sets ``interrupted_by``)."""
_LOCK_THREAD = "SELECT pg_advisory_xact_lock(hashtextextended('threadwarden:thread:' || $1, 0))"
"""Serialises ``reject`` and ``interrupt`` admissions of one thread (the thread's row may not
exist yet), so that two of them never both see it idle."""
_LOCK_HOST = "SELECT 1 FROM threadwarden.hosts WHERE host_id = $1 FOR UPDATE"
"""Then the thread's host row (when it exists), which every admission's write locks first:
an ``enqueue`` admission racing a ``reject`` either committed before its read or waits."""
_GATE = (
    host_gate("host_id", "$11", new_work="1", source="target")
    + """, t AS (
  INSERT INTO threadwarden.threads AS t (thread_id, host_id, next_sequence)
  SELECT $2, host_id, 2 FROM h
  ON CONFLICT (thread_id) DO UPDATE SET next_sequence = t.next_sequence + 1
  RETURNING t.host_id, t.next_sequence - 1 AS sequence
), s AS (
  INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence, idempotency_key,
         payload_digest, agent_id, agent_digest, input, state, source_thread_id,
         source_message_id)
  SELECT $3, $2, sequence, $4, $5, $6, $7, COALESCE($8::jsonb, 'null'::jsonb), 'ready', $9, $10
    FROM t WHERE t.host_id = (SELECT host_id FROM target)
  RETURNING sequence
)
"""
)
"""The mutation gate for one admission into ``target``'s host: lock the host (hosts, then
threads, then submissions, the lock order everywhere), bump its generation and nonterminal
count, ensure its alarm (reporting whether an alarm at least as early was already armed, so the
caller can skip a redundant wake), take the thread's next sequence and insert the submission."""
_WRITTEN = "(SELECT sequence FROM s) AS written, (SELECT already_armed FROM h) AS already_armed"
_WRITE = f"""
WITH target AS (SELECT $1::text AS host_id), {_GATE}
SELECT {_WRITTEN}
"""
"""The write of an admission that read first (``reject``, ``interrupt``)."""
ENQUEUE = f"""
WITH found AS (
  SELECT t.host_id AS owner, s.submission_id, s.sequence, s.payload_digest,
         NULL::text[] AS interrupted, NULL::boolean AS busy
    FROM (SELECT $2::text AS thread_id) q
    LEFT JOIN threadwarden.threads t ON t.thread_id = q.thread_id
    LEFT JOIN threadwarden.submissions s ON s.thread_id = q.thread_id AND s.idempotency_key = $4
), target AS (
  SELECT COALESCE($1, owner, $2) AS host_id FROM found
   WHERE submission_id IS NULL AND (owner IS NULL OR owner = COALESCE($1, owner))
), {_GATE}
SELECT found.*, {_WRITTEN} FROM found
"""
"""An ``enqueue`` admission (the hot path) in one statement: `KEY_READ`'s owner and keyed
submission, and the write only when the key names none and the thread is the host's (or new):
``$1`` is the host asked for (None: the thread's owner, else the thread id)."""


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
        """`admit` inside the caller's transaction. An ``enqueue`` admission is one statement
        (`ENQUEUE`: the read, and the write when it may); ``reject`` and ``interrupt`` first take
        the thread's admission lock, read, and (``interrupt``) ask the earlier submissions to
        abort before the write."""
        thread_id, if_busy = request["thread_id"], request.get("if_busy", "enqueue")
        submission_id = f"sub_{uuid.uuid4().hex}"
        source = request.get("source")
        write_args = [
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
        ]
        if if_busy == "enqueue":
            asked = request.get("host_id") or None  # as `_checked` reads it
            found = await conn.fetchrow(ENQUEUE, asked, *write_args)
            assert found is not None
            host = self._checked(found, thread_id, key, digest, request.get("host_id"))
            return self._receipt(found, found, thread_id, host, submission_id, [])
        await conn.execute(_LOCK_THREAD, thread_id)
        found = await conn.fetchrow(KEY_READ, thread_id, key, True)
        assert found is not None
        if found["owner"] is not None:
            await conn.execute(_LOCK_HOST, found["owner"])
            found = await conn.fetchrow(KEY_READ, thread_id, key, True)  # as of the lock
            assert found is not None
        host = self._checked(found, thread_id, key, digest, request.get("host_id"))
        if found["submission_id"] is None and if_busy == "reject" and found["busy"]:
            raise ThreadBusy(
                f"thread: {thread_id} has a submission that has not settled (if_busy reject)"
            )
        interrupted: list[OperatorResult] = []
        if found["submission_id"] is None and if_busy == "interrupt" and found["busy"]:
            interrupted = await interrupt(
                conn, thread_id, submission_id, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
            )
        written = None
        if found["submission_id"] is None:
            written = await conn.fetchrow(_WRITE, host, *write_args)
        return self._receipt(found, written, thread_id, host, submission_id, interrupted)

    @staticmethod
    def _checked(
        found: asyncpg.Record, thread_id: str, key: str, digest: str, asked: str | None
    ) -> str:
        """The host the admission goes to (the one asked, else the thread's owner, else the
        thread id), once the thread is known to be that host's and the key, if it names a
        submission already, to have been used for this payload."""
        owner = found["owner"]
        host: str = asked or owner or thread_id
        if owner is not None and owner != host:
            raise HostMismatch(f"host: thread {thread_id} belongs to host {owner}, not {host}")
        if found["submission_id"] is not None and found["payload_digest"] != digest:
            raise IdempotencyConflict(
                f"idempotency_key: {key!r} was already used on thread {thread_id}"
                " for a different payload"
            )
        return host

    @staticmethod
    def _receipt(
        found: asyncpg.Record,
        written: asyncpg.Record | None,
        thread_id: str,
        host: str,
        submission_id: str,
        interrupted: list[OperatorResult],
    ) -> Receipt:
        """The receipt: of the submission the key named (nothing written), or of the new one."""
        if found["submission_id"] is not None:
            return Receipt(
                submission_id=found["submission_id"],
                thread_id=thread_id,
                host_id=host,
                sequence=found["sequence"],
                created=False,
                wake=False,
                interrupted=list(found["interrupted"] or []),
            )
        if written is None or written["written"] is None:  # created meanwhile, for another host
            raise HostMismatch(f"host: thread {thread_id} belongs to another host than {host}")
        return Receipt(
            submission_id=submission_id,
            thread_id=thread_id,
            host_id=host,
            sequence=int(written["written"]),
            created=True,
            wake=not written["already_armed"] or bool(interrupted),
            interrupted=[result.submission_id for result in interrupted],
            parent_hosts=sorted({r.parent_host_id for r in interrupted if r.parent_host_id}),
        )
