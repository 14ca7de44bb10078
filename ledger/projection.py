"""The thread-summary projection: last record and submissions per state, per thread.

Disposable: `apply_committed` refreshes a thread after a commit (best effort) and the pass
backfills, one bounded batch at a time and only when the host's ``projection_due_at`` has come,
every thread whose summary is missing or behind its records. The deadline is set when a refresh
failed, a batch left work behind, or an operator asked for a rebuild; it is receipt-only
bookkeeping: it arms the host's alarm without making the host dirty. Nothing reads the
projection to make a decision; it serves status and dashboards.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.errors import NotFound
from threadwarden.ledger.gate import mark_dirty
from threadwarden.ledger.pool import Connection

BATCH = 50


def refresh_statement(threads: str) -> str:
    """The upsert of the summaries of the threads the ``text[]`` parameter ``threads`` (``$n``)
    names, recomputed from the ledger: a statement, or a CTE of a larger one."""
    return f"""
INSERT INTO threadwarden.thread_summaries (thread_id, host_id, last_sequence, last_kind, states)
SELECT t.thread_id, t.host_id, t.next_record - 1,
       (SELECT kind FROM threadwarden.records r
         WHERE r.thread_id = t.thread_id AND r.sequence = t.next_record - 1),
       COALESCE((SELECT jsonb_object_agg(state, n) FROM (
                   SELECT state, count(*) AS n FROM threadwarden.submissions s
                    WHERE s.thread_id = t.thread_id AND s.state <> 'settled' GROUP BY state
                   UNION ALL
                   SELECT 'settled', t.next_sequence - 1 - (
                            SELECT count(*) FROM threadwarden.submissions s
                             WHERE s.thread_id = t.thread_id AND s.state <> 'settled')) c
                  WHERE n > 0), '{{}}'::jsonb)
  FROM threadwarden.threads t WHERE t.thread_id = ANY({threads}::text[])
ON CONFLICT (thread_id) DO UPDATE
   SET last_sequence = EXCLUDED.last_sequence, last_kind = EXCLUDED.last_kind,
       states = EXCLUDED.states, refreshed_at = clock_timestamp()
"""


REFRESH = refresh_statement("$1")
_DUE = """
SELECT t.thread_id FROM threadwarden.threads t
  LEFT JOIN threadwarden.thread_summaries s USING (thread_id)
 WHERE t.host_id = $1 AND (s.thread_id IS NULL OR s.last_sequence < t.next_record - 1)
 ORDER BY t.thread_id LIMIT $2
"""


class ThreadSummary(BaseModel):
    thread_id: str
    last_sequence: int
    last_kind: str | None
    states: dict[str, int]


async def refresh(conn: Connection, thread_ids: list[str]) -> None:
    """Recompute the summaries of ``thread_ids`` from the ledger."""
    await conn.execute(REFRESH, thread_ids)


class Projection:
    """Keeps and backfills thread summaries."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int = 50) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def mark_due(self, host_id: str) -> None:
        """Ask for a backfill of the host (its alarm is armed; the host is not made dirty)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._mark_due(conn, host_id)

    async def rebuild(self, host_id: str) -> None:
        """Drop the host's summaries and have the passes rebuild them, a batch at a time."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM threadwarden.thread_summaries WHERE host_id = $1", host_id
            )
            await self._mark_due(conn, host_id)

    async def _mark_due(self, conn: Connection, host_id: str) -> None:
        found = await conn.fetchval(
            "UPDATE threadwarden.hosts SET projection_due_at = LEAST(projection_due_at,"
            " clock_timestamp()) WHERE host_id = $1 RETURNING true",
            host_id,
        )
        if not found:
            raise NotFound(f"host: no host {host_id!r}")
        await mark_dirty(
            conn,
            host_id,
            minimum_alarm_delay_ms=self._minimum_alarm_delay_ms,
            invalidates_recovery=False,
        )

    async def apply_committed(self, thread_id: str) -> None:
        """Refresh one thread right after a commit."""
        async with self._pool.acquire() as conn:
            await refresh(conn, [thread_id])

    async def backfill(self, host_id: str) -> int:
        """Refresh one batch of the host's stale threads; returns how many were refreshed.

        A full batch leaves the deadline due (the next pass continues); a partial one clears
        it, unless a newer request marked it meanwhile.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            started = await conn.fetchval("SELECT clock_timestamp()")
            due = [r["thread_id"] for r in await conn.fetch(_DUE, host_id, BATCH)]
            if due:
                await refresh(conn, due)
            if len(due) < BATCH:
                await conn.execute(
                    "UPDATE threadwarden.hosts SET projection_due_at = NULL"
                    " WHERE host_id = $1 AND projection_due_at <= $2",
                    host_id,
                    started,
                )
        return len(due)

    async def summary(self, thread_id: str) -> ThreadSummary | None:
        """The thread's summary, or None before it was projected."""
        row = await self._pool.fetchrow(
            "SELECT thread_id, last_sequence, last_kind, states"
            "  FROM threadwarden.thread_summaries WHERE thread_id = $1",
            thread_id,
        )
        return None if row is None else ThreadSummary(**dict(row))
