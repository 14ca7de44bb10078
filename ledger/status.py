"""Read-only views of threads and hosts for the CLI and the client."""

from __future__ import annotations

from typing import Any

import asyncpg

from threadwarden.errors import NotFound
from threadwarden.ledger.deadlines import DEADLINES
from threadwarden.ledger.models import (
    AuxiliaryDueView,
    BindingRetryView,
    HostStatus,
    RetryView,
    SubmissionView,
    ThreadStatus,
    WaitingFor,
    from_ms,
    retry_from_json,
)
from threadwarden.ledger.pool import Connection

_RECORDS_AFTER = (
    "SELECT sequence, record_id, submission_id, kind, body, epoch"
    "  FROM threadwarden.records WHERE thread_id = $1 AND sequence > $2 ORDER BY sequence"
)

SETTLEMENT_OF = (
    "SELECT s.thread_id, r.body FROM threadwarden.submissions s"
    "  LEFT JOIN threadwarden.records r ON r.submission_id = $1 AND r.kind = 'settlement'"
    " WHERE s.submission_id = $1"
)
"""A submission's thread and settlement body. The records side compares with the parameter,
not with ``s.submission_id``: that column's "C" collation differs from the records column's,
and such a comparison cannot use ``records_one_settlement`` (a scan of every record)."""


class StatusReader:
    """Snapshots of the ledger; no locks taken."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def thread(self, thread_id: str) -> ThreadStatus:
        """A thread's submissions in sequence order."""
        async with self._pool.acquire() as conn:
            host_id = await conn.fetchval(
                "SELECT host_id FROM threadwarden.threads WHERE thread_id = $1", thread_id
            )
            if host_id is None:
                raise NotFound(f"thread: no thread {thread_id!r}")
            rows = await conn.fetch(
                "SELECT submission_id, sequence, state, outcome, agent_id, attempts, epoch, reason,"
                "       source_thread_id, source_message_id, created_at, settled_at"
                "  FROM threadwarden.submissions WHERE thread_id = $1 ORDER BY sequence",
                thread_id,
            )
            retries = await conn.fetchval(
                "SELECT binding_retries FROM threadwarden.hosts WHERE host_id = $1", host_id
            )
        blocked = {r["submission_id"] for r in retries or []}
        return ThreadStatus(
            thread_id=thread_id,
            host_id=host_id,
            submissions=[
                SubmissionView(**dict(r), waiting_for=_waiting_for(r, blocked)) for r in rows
            ],
        )

    async def host(self, host_id: str) -> HostStatus:
        """A host's maintenance state: generations, alarm, cursor and retry records."""
        row = await self._pool.fetchrow(
            "SELECT host_id, dirty, processed, nonterminal, alarm_at, last_served_thread_id,"
            "       retry, binding_retries, pass_epoch, last_outcome, last_error, updated_at,"
            f"       {DEADLINES}"
            "  FROM threadwarden.hosts h WHERE host_id = $1",
            host_id,
        )
        if row is None:
            raise NotFound(f"host: no host {host_id!r}")
        retry = retry_from_json(row["retry"])
        fields = dict(row)
        fields["auxiliary_due"] = AuxiliaryDueView(
            publication=fields.pop("publication_due"),
            message=fields.pop("message_due"),
            projection=fields.pop("projection_due_at"),
            host_work=fields.pop("host_work_due_at"),
        )
        fields["retry"] = (
            None
            if retry is None
            else RetryView(
                generation=retry.generation,
                not_before=from_ms(retry.not_before),
                native_only=retry.native_only,
                stalls=retry.stalls,
            )
        )
        fields["binding_retries"] = [
            BindingRetryView(
                thread_id=r["thread_id"],
                submission_id=r["submission_id"],
                attempts=r["attempts"],
                not_before=from_ms(r["not_before"]),
                reported_at=from_ms(r["reported_at"]),
            )
            for r in row["binding_retries"]
        ]
        return HostStatus(**fields)

    async def records(self, thread_id: str) -> list[dict[str, Any]]:
        """A thread's canonical records in order."""
        return [dict(r) for r in await self._pool.fetch(_RECORDS_AFTER, thread_id, 0)]


async def records_after(conn: Connection, thread_id: str, after: int) -> list[dict[str, Any]]:
    """The thread's canonical records with a sequence above ``after``, in order.

    Sequences commit in order (the thread row is locked from allocation to commit), so a
    reader that remembers the last sequence it saw never skips one.
    """
    return [dict(r) for r in await conn.fetch(_RECORDS_AFTER, thread_id, after)]


async def settlement_of(conn: Connection, submission_id: str) -> tuple[str, Any]:
    """The submission's thread and its settlement record's body (None while unsettled).

    Raises `NotFound` for an unknown submission.
    """
    row = await conn.fetchrow(SETTLEMENT_OF, submission_id)
    if row is None:
        raise NotFound(f"submission: no submission {submission_id!r}")
    return row["thread_id"], row["body"]


def _waiting_for(row: asyncpg.Record, blocked: set[str]) -> WaitingFor | None:
    if row["state"] == "suspended":
        return "approval"
    if row["state"] == "unknown":
        return "unknown-resolution"
    if row["state"] != "settled" and row["submission_id"] in blocked:
        return "binding"
    return None
