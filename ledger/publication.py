"""The publication outbox: drain due records through the sinks, persist retries, report when
the next attempt is due."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from ledger.pool import Connection
from threadwarden.publication import PublicationSink, PublishedRecord

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "threadwarden_records"
"""The LISTEN/NOTIFY channel of the built-in sink (payload: thread_id, sequence, record_id,
kind; bodies stay in the ledger)."""
BATCH = 100
RETRY_BASE_MS, RETRY_CAP_MS = 1_000, 60_000
"""Backoff of a failed publication batch or message delivery: 1 s doubling, at most 60 s."""

_DUE = """
SELECT p.record_id, r.thread_id, r.sequence, r.submission_id, r.kind, r.body, p.attempts
  FROM threadwarden.publications p JOIN threadwarden.records r USING (record_id)
 WHERE p.host_id = $1 AND p.not_before <= clock_timestamp()
 ORDER BY r.thread_id, r.sequence
 LIMIT $2
 FOR UPDATE OF p SKIP LOCKED
"""


class NotifySink:
    """The built-in sink: one Postgres NOTIFY per record on `NOTIFY_CHANNEL`."""

    name = "postgres-notify"

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            for record in records:
                payload = {
                    "thread_id": record.thread_id,
                    "sequence": record.sequence,
                    "record_id": record.record_id,
                    "kind": record.kind,
                }
                await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, json.dumps(payload))


class Publications:
    """Drains a host's outbox through its sinks."""

    def __init__(self, pool: asyncpg.Pool[Any], sinks: Sequence[PublicationSink]) -> None:
        self._pool = pool
        self._sinks = list(sinks)
        self._required = [s.name for s in self._sinks if getattr(s, "required", False)]

    @property
    def gating(self) -> bool:
        """Some sink is required: unpublished records hold back native work."""
        return bool(self._required)

    async def gate(self, host_id: str) -> datetime | None:
        """While a required sink has unpublished records of the host: when they are next due.

        None when no sink is required or everything is published.
        """
        if not self._required:
            return None
        async with self._pool.acquire() as conn:
            return await pending_deadline(conn, host_id)

    async def publish_committed(self, host_id: str) -> None:
        """After a committed mutation: publish what it recorded, best effort. A failure is
        logged, never raised (the outbox keeps the records and the next pass retries)."""
        try:
            await self.drain(host_id)
        except Exception as error:  # the mutation already committed; it must not fail now
            logger.warning("publication after a mutation on %s failed: %r", host_id, error)

    async def drain(self, host_id: str) -> int:
        """Publish one batch of due records; on a sink failure back them off. Returns how many
        were published. Never raises for a sink failure (it is logged and persisted)."""
        async with self._pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(_DUE, host_id, BATCH)
            if not rows:
                return 0
            records = [
                PublishedRecord(
                    thread_id=r["thread_id"],
                    sequence=int(r["sequence"]),
                    record_id=r["record_id"],
                    submission_id=r["submission_id"],
                    kind=r["kind"],
                    body=r["body"],
                )
                for r in rows
            ]
            ids = [r["record_id"] for r in rows]
            try:
                for sink in self._sinks:
                    await sink.publish(records)
            except Exception as error:  # a sink failure is persisted and retried, never raised
                logger.warning(
                    "publication to host %s failed (%d records): %r", host_id, len(ids), error
                )
                await conn.execute(
                    "UPDATE threadwarden.publications SET attempts = attempts + 1,"
                    " last_error = $2, not_before = clock_timestamp() + make_interval(secs =>"
                    " LEAST($3::float8, $4::float8 * 2 ^ attempts) / 1000)"
                    " WHERE record_id = ANY($1::text[])",
                    ids,
                    repr(error)[:500],
                    RETRY_CAP_MS,
                    RETRY_BASE_MS,
                )
                return 0
            await conn.execute(
                "DELETE FROM threadwarden.publications WHERE record_id = ANY($1::text[])", ids
            )
            return len(ids)


async def pending_deadline(conn: Connection, host_id: str) -> datetime | None:
    """When the host's oldest unpublished record is next due (None when all are published)."""
    value = await conn.fetchval(
        "SELECT min(not_before) FROM threadwarden.publications WHERE host_id = $1", host_id
    )
    return value if isinstance(value, datetime) else None
