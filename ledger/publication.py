"""The publication outbox: drain due records through the sinks, persist retries, report when
the next attempt is due.

A drain never holds one pooled connection while it waits for another, and never calls an
application sink while it holds a connection or a row lock:

- The built-in NOTIFY goes out in the statement that acknowledges (deletes) the outbox rows, on
  that statement's own connection, so it is delivered exactly when the acknowledgement commits.
  With only the built-in sink (the default) a drain is that one autocommit statement; the drain
  right after an attempt's commit also refreshes the thread's summary in it
  (`Publications.publish_committed`).
- External sinks: one short statement claims the due batch (pushes its ``not_before`` forward by
  ``CLAIM_LEASE_MS`` and returns it; an abandoned claim comes due again), the connection goes
  back to the pool, the sinks are called, then one statement acknowledges the rows the claim
  still holds (delete + NOTIFY) or backs them off. The claimed ``not_before`` is the claim's
  token: a row that came due again and was claimed by another drain is that drain's to settle.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from threadwarden.ledger.pass_finish import finish_view
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.projection import refresh_statement
from threadwarden.publication import PublicationSink, PublishedRecord

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "threadwarden_records"
"""The LISTEN/NOTIFY channel of the built-in sink (payload: thread_id, sequence, record_id,
kind; bodies stay in the ledger)."""
BATCH = 100
RETRY_BASE_MS, RETRY_CAP_MS = 1_000, 60_000
"""Backoff of a failed publication batch or message delivery: 1 s doubling, at most 60 s."""
CLAIM_LEASE_MS = 30_000
"""How long a batch claimed for external sinks stays with its drain; then it comes due again."""

_DUE = """
SELECT record_id FROM threadwarden.publications
 WHERE host_id = $1 AND not_before <= clock_timestamp()
 ORDER BY thread_id, sequence
 LIMIT $2
 FOR UPDATE SKIP LOCKED
"""

# The acknowledged rows (``gone``), with the built-in NOTIFY: volatile output expressions are
# evaluated after the ORDER BY, so the notifications follow thread/sequence order.
_NOTIFY_GONE = """
SELECT pg_notify($3, json_build_object('thread_id', g.thread_id, 'sequence', g.sequence,
                                       'record_id', g.record_id, 'kind', r.kind)::text)
  FROM gone g JOIN threadwarden.records r USING (thread_id, sequence)
 ORDER BY g.thread_id, g.sequence
"""
_COUNT_GONE = "SELECT g.record_id FROM gone g"

_DRAIN_CTES = f"""
due AS ({_DUE}),
gone AS (
    DELETE FROM threadwarden.publications p USING due WHERE p.record_id = due.record_id
    RETURNING p.thread_id, p.sequence, p.record_id
)
"""
_DRAIN = "WITH " + _DRAIN_CTES
"""Publish-and-acknowledge in one statement: $1 host, $2 batch (, $3 channel)."""
_REFRESHING = f"""
WITH summaries AS ({refresh_statement("$4")}), {_DRAIN_CTES},
note AS ({_NOTIFY_GONE})
SELECT (SELECT count(*) FROM note) AS published, {finish_view("gone")}
  FROM (SELECT 1) one LEFT JOIN threadwarden.hosts h ON h.host_id = $1
"""
"""After an attempt's commit, with only the built-in sink: the summaries of the threads ``$4``
refreshed (a data-modifying CTE runs whether or not the query reads it), one batch of the
host's due records published and acknowledged (`_DRAIN`; ``note`` is read by the count, so
every NOTIFY goes out, in its ORDER BY's order), and one row, always: how many were published
and the host as a finish reads it (`finish_view`), the acknowledged records no longer due.
$1 host, $2 batch, $3 channel, $4 threads."""

CLAIM = f"""
WITH due AS ({_DUE}),
claimed AS (
    UPDATE threadwarden.publications p
       SET not_before = clock_timestamp() + make_interval(secs => $3::float8 / 1000)
      FROM due WHERE p.record_id = due.record_id
    RETURNING p.record_id, p.thread_id, p.sequence, p.not_before
)
SELECT c.record_id, c.thread_id, c.sequence, c.not_before, r.submission_id, r.kind, r.body
  FROM claimed c JOIN threadwarden.records r USING (thread_id, sequence)
 ORDER BY c.thread_id, c.sequence
"""
"""Claim a batch for the external sinks: $1 host, $2 batch, $3 lease (ms)."""

_ACK = """
WITH gone AS (
    DELETE FROM threadwarden.publications p
     USING unnest($1::text[], $2::timestamptz[]) AS c(record_id, not_before)
     WHERE p.record_id = c.record_id AND p.not_before = c.not_before
    RETURNING p.thread_id, p.sequence, p.record_id
)
"""
"""Acknowledge the rows this claim still holds: $1 record ids, $2 their claimed not_before."""

_BACK_OFF = """
UPDATE threadwarden.publications p
   SET attempts = p.attempts + 1, last_error = $3,
       not_before = clock_timestamp() + make_interval(secs =>
           LEAST($4::float8, $5::float8 * 2 ^ p.attempts) / 1000)
  FROM unnest($1::text[], $2::timestamptz[]) AS c(record_id, not_before)
 WHERE p.record_id = c.record_id AND p.not_before = c.not_before
"""


@dataclass(frozen=True)
class Committed:
    """What `Publications.publish_committed` did."""

    refreshed: bool
    """The summaries asked for were refreshed too (else the caller refreshes them)."""
    view: asyncpg.Record | None = None
    """The host as a pass's finish reads it (`threadwarden.ledger.pass_finish.finish_view`),
    right after the acknowledgement, when asked for and read in the same statement."""


class NotifySink:
    """The built-in sink: one Postgres NOTIFY per record on `NOTIFY_CHANNEL`.

    `Publications` does not call `publish`: it sends these notifications in the statement that
    acknowledges the records, on that statement's connection. `publish` serves a caller outside
    a drain; it takes one connection of ``pool`` (so never call it while holding another
    connection of the same pool).
    """

    name = "postgres-notify"

    def __init__(self, pool: asyncpg.Pool[Any] | None = None) -> None:
        self._pool = pool

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        if self._pool is None:
            raise RuntimeError("NotifySink.publish needs a pool (Publications never calls it)")
        payloads = [
            json.dumps(
                {
                    "thread_id": r.thread_id,
                    "sequence": r.sequence,
                    "record_id": r.record_id,
                    "kind": r.kind,
                }
            )
            for r in records
        ]
        await self._pool.execute(
            "SELECT pg_notify($1, u.payload)"
            " FROM unnest($2::text[]) WITH ORDINALITY AS u(payload, n) ORDER BY u.n",
            NOTIFY_CHANNEL,
            payloads,
        )


class Publications:
    """Drains a host's outbox through its sinks (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool[Any], sinks: Sequence[PublicationSink]) -> None:
        self._pool = pool
        self._notify = any(isinstance(s, NotifySink) for s in sinks)
        self._external = [s for s in sinks if not isinstance(s, NotifySink)]
        self._required = [s.name for s in sinks if getattr(s, "required", False)]
        finish = _NOTIFY_GONE if self._notify else _COUNT_GONE
        self._drain_sql = _DRAIN + finish
        self._ack_sql = _ACK + finish
        self._refreshing_sql = _REFRESHING

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

    async def publish_committed(
        self, host_id: str, *, refresh: Sequence[str] = (), view: bool = False
    ) -> Committed:
        """After a committed mutation: publish what it recorded, best effort. A failure is
        logged, never raised (the outbox keeps the records and the next pass retries).

        With only the built-in sink and ``refresh``, one statement (`_REFRESHING`) also refreshes
        the summaries of the threads ``refresh`` (`threadwarden.ledger.projection`) and, with
        ``view``, reads the host as a pass's finish does (`finish_view`, the records it
        acknowledges no longer due), so that the finish that follows need not read it again.
        Otherwise, or when that statement failed (it is atomic: nothing was done), the records
        are drained alone and the caller refreshes the summaries (`Committed.refreshed`)."""
        if refresh and self._notify and not self._external:
            try:
                args = (host_id, BATCH, NOTIFY_CHANNEL, list(refresh))
                row = await self._pool.fetchrow(self._refreshing_sql, *args)
                assert row is not None  # one row, always
                self.published(int(row["published"]))
                seen = view and row["pass_epoch"] is not None
                return Committed(refreshed=True, view=row if seen else None)
            except Exception as error:  # the mutation already committed; it must not fail now
                logger.warning("publication after a mutation on %s failed: %r", host_id, error)
        try:
            await self.drain(host_id)
        except Exception as error:  # the mutation already committed; it must not fail now
            logger.warning("publication after a mutation on %s failed: %r", host_id, error)
        return Committed(refreshed=False)

    def published(self, count: int) -> None:
        """Told how many records a drain published (a hook: `worker.metrics` counts them)."""

    async def drain(self, host_id: str) -> int:
        """Publish one batch of due records; on a sink failure back them off. Returns how many
        were published. Never raises for a sink failure (it is logged and persisted)."""
        count = await self._drain(host_id)
        self.published(count)
        return count

    async def _drain(self, host_id: str) -> int:
        if not self._external:  # one autocommit statement: NOTIFY and delete commit together
            rows = await self._pool.fetch(self._drain_sql, *self._args(host_id, BATCH))
            return len(rows)
        claimed = await self._pool.fetch(CLAIM, host_id, BATCH, CLAIM_LEASE_MS)
        if not claimed:
            return 0
        # No connection is held from here until the acknowledgement.
        records = [
            PublishedRecord(
                thread_id=r["thread_id"],
                sequence=int(r["sequence"]),
                record_id=r["record_id"],
                submission_id=r["submission_id"],
                kind=r["kind"],
                body=r["body"],
            )
            for r in claimed
        ]
        ids = [r["record_id"] for r in claimed]
        tokens = [r["not_before"] for r in claimed]
        try:
            for sink in self._external:
                await sink.publish(records)
        except Exception as error:  # a sink failure is persisted and retried, never raised
            logger.warning(
                "publication to host %s failed (%d records): %r", host_id, len(ids), error
            )
            await self._pool.execute(
                _BACK_OFF, ids, tokens, repr(error)[:500], RETRY_CAP_MS, RETRY_BASE_MS
            )
            return 0
        acknowledged = await self._pool.fetch(self._ack_sql, *self._args(ids, tokens))
        return len(acknowledged)

    def _args(self, *args: object) -> tuple[object, ...]:
        return (*args, NOTIFY_CHANNEL) if self._notify else args


async def pending_deadline(conn: Connection, host_id: str) -> datetime | None:
    """When the host's oldest unpublished record is next due (None when all are published)."""
    value = await conn.fetchval(
        "SELECT min(not_before) FROM threadwarden.publications WHERE host_id = $1", host_id
    )
    return value if isinstance(value, datetime) else None
