"""Canonical records: the one insert path, and settlement (shared by attempts, operators and
recovery)."""

from __future__ import annotations

from typing import Any

from threadwarden.bindings import ThreadRecord
from threadwarden.ledger.child_settled import record_child_settled_in
from threadwarden.ledger.models import ChildSettled
from threadwarden.ledger.pool import Connection
from threadwarden.protocol.decisions import Timing
from threadwarden.views import FinalOutcome

MINIMUM_ALARM_DELAY_MS = Timing().minimum_alarm_delay
"""The alarm floor a settle path uses on a parent's host when its caller names none."""
COMMITTED_CHANNEL = "threadwarden_committed"
"""The NOTIFY channel of the ledger's readers: every record's statement notifies it with its
thread and kind (JSON ``{"thread_id", "kind"}``), delivered when the record commits. Postgres
folds identical notifications of one transaction, so a pass writing several records of a kind
sends one. It is a hint to read (`threadwarden.reading`), apart from the built-in sink's
`threadwarden.ledger.publication.NOTIFY_CHANNEL`, which means "published" and comes later."""


def record_statement(first: int, *, guard: str = "") -> str:
    """The CTEs that append one record and its outbox row and notify the ledger's readers
    (`COMMITTED_CHANNEL`), ending in ``SELECT sequence``.

    Parameters, from ``$first``: thread id, submission id, kind, body, epoch, step. ``guard``
    is an SQL condition the append also needs (a fence); when it fails nothing is written,
    nothing is notified and the statement returns no row.
    """
    thread, submission, kind, body, epoch, step = (f"${first + n}" for n in range(6))
    condition = f" AND {guard}" if guard else ""
    return f"""
seq AS (
  UPDATE threadwarden.threads SET next_record = next_record + 1
   WHERE thread_id = {thread}{condition}
  RETURNING thread_id, host_id, next_record - 1 AS sequence
), rec AS (
  INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id, kind, body,
                                    epoch, step)
  SELECT thread_id, sequence, thread_id || ':' || sequence, {submission}, {kind},
         COALESCE({body}::jsonb, 'null'::jsonb), {epoch}, {step}::integer
    FROM seq
), pub AS (
  -- Into the publication outbox, in the same statement: published at least once.
  INSERT INTO threadwarden.publications (record_id, host_id, thread_id, sequence)
  SELECT thread_id || ':' || sequence, host_id, thread_id, sequence FROM seq
), note AS (
  -- Readers hear of it when it commits (a SELECT CTE runs only when referenced: below).
  SELECT pg_notify('{COMMITTED_CHANNEL}',
                   json_build_object('thread_id', thread_id, 'kind', {kind}::text)::text)
    FROM seq
)
SELECT sequence FROM seq, note
"""


INSERT_RECORD = "WITH " + record_statement(1)
"""One canonical record and its outbox row; returns the record's sequence."""


def abort_reason(interrupted_by: str | None) -> str:
    """Why an aborted submission settled: an operator's abort, or the ``if_busy="interrupt"``
    admission that asked it to stop (``interrupted_by``)."""
    return (
        "aborted by an operator" if interrupted_by is None else f"interrupted by {interrupted_by}"
    )


async def insert_record(
    conn: Connection,
    *,
    thread_id: str,
    submission_id: str,
    kind: str,
    body: Any,
    epoch: int,
    step: int | None = None,
) -> ThreadRecord:
    """Append at the thread's next sequence, with its publication outbox row: one statement.

    The caller holds the thread row ``FOR UPDATE`` (or takes it here, through the update).
    """
    sequence = await conn.fetchval(INSERT_RECORD, thread_id, submission_id, kind, body, epoch, step)
    return appended(thread_id, int(sequence), submission_id, kind, body, step)


def appended(
    thread_id: str, sequence: int, submission_id: str, kind: str, body: Any, step: int | None
) -> ThreadRecord:
    """The record an append wrote at ``sequence`` (its id is ``thread:sequence``)."""
    return ThreadRecord(
        sequence=sequence,
        record_id=f"{thread_id}:{sequence}",
        submission_id=submission_id,
        kind=kind,
        body=body,
        step=step,
    )


async def journal(conn: Connection, submission_id: str) -> list[ThreadRecord]:
    """The submission's journal: its step records in order."""
    rows = await conn.fetch(
        "SELECT sequence, record_id, submission_id, kind, body, step FROM threadwarden.records"
        " WHERE submission_id = $1 AND step IS NOT NULL ORDER BY sequence",
        submission_id,
    )
    return [ThreadRecord(**dict(r)) for r in rows]


async def fence_thread(conn: Connection, thread_id: str) -> int:
    """Bump the thread's producer epoch (an operator or recovery write): stale attempts stop."""
    epoch = await conn.fetchval(
        "UPDATE threadwarden.threads SET producer_epoch = producer_epoch + 1"
        " WHERE thread_id = $1 RETURNING producer_epoch",
        thread_id,
    )
    return int(epoch)


async def settle_now(
    conn: Connection,
    *,
    thread_id: str,
    submission_id: str,
    outcome: FinalOutcome,
    result: Any = None,
    reason: str | None = None,
    epoch: int,
    minimum_alarm_delay_ms: int = MINIMUM_ALARM_DELAY_MS,
) -> ChildSettled | None:
    """Append the settlement record (unless one exists) and finalize the row as settled.

    Idempotent, so recovery can finish a reserved settlement from canonical history. When the
    submission is a child, its settlement is recorded on the parent's host in the same
    transaction (`record_child_settled_in`; the caller took both hosts in byte order) and that
    is returned: the caller wakes the parent's host after commit.
    """
    existing = await conn.fetchrow(
        "SELECT body, epoch FROM threadwarden.records"
        " WHERE submission_id = $1 AND kind = 'settlement'",
        submission_id,
    )
    if existing is not None:  # canonical history wins: the row follows the recorded outcome
        outcome, reason = existing["body"]["outcome"], existing["body"]["reason"]
        epoch = int(existing["epoch"])
    else:
        await insert_record(
            conn,
            thread_id=thread_id,
            submission_id=submission_id,
            kind="settlement",
            body={"outcome": outcome, "result": result, "reason": reason},
            epoch=epoch,
        )
    parent = await conn.fetchval(
        "UPDATE threadwarden.submissions SET state = 'settled', outcome = $2, reason = $3,"
        " settled_at = clock_timestamp(), ownership_token = NULL, lease_expires_at = NULL,"
        " reserved_outcome = NULL, reserved_result = NULL, reserved_reason = NULL, epoch = $4"
        " WHERE submission_id = $1 RETURNING parent_submission_id",
        submission_id,
        outcome,
        reason,
        epoch,
    )
    if parent is None:
        return None
    return await record_child_settled_in(
        conn, submission_id, minimum_alarm_delay_ms=minimum_alarm_delay_ms
    )


def pending_step(
    steps: list[ThreadRecord], opened: str, closers: tuple[str, ...]
) -> ThreadRecord | None:
    """The latest ``opened`` record whose step has none of ``closers`` yet."""
    closed = {r.step for r in steps if r.kind in closers}
    candidates = [r for r in steps if r.kind == opened and r.step not in closed]
    return candidates[-1] if candidates else None


def unresolved_side_effect(steps: list[ThreadRecord]) -> ThreadRecord | None:
    """A side-effecting tool call without a result or resolution: it may or may not have run."""
    call = pending_step(steps, "tool-call", ("tool-result", "tool-resolution"))
    if call is None or not isinstance(call.body, dict):
        return None
    if call.body.get("side_effect") and not call.body.get("idempotency_key"):
        return call
    return None
