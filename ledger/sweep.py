"""The sweeper's queries: which hosts' alarms are overdue, and when the next one will be."""

from __future__ import annotations

import math
from typing import Any

import asyncpg
from pydantic import BaseModel

OVERDUE = """
SELECT h.host_id FROM threadwarden.hosts h
 WHERE h.alarm_at < clock_timestamp() - make_interval(secs => $1::float8 / 1000)
   AND NOT EXISTS (
     SELECT 1 FROM threadwarden.submissions s JOIN threadwarden.threads t USING (thread_id)
      WHERE t.host_id = h.host_id AND s.state = 'running'
        AND s.lease_expires_at > clock_timestamp())
 ORDER BY h.alarm_at LIMIT $2
"""
"""Hosts overdue by more than the grace ($1 ms), except those with a live attempt lease (index
``hosts_alarm_at``)."""

NEXT_DUE = """
SELECT least(
  (SELECT extract(epoch FROM min(h.alarm_at) - clock_timestamp()) * 1000 + $1
     FROM threadwarden.hosts h
    WHERE h.alarm_at >= clock_timestamp() - make_interval(secs => $1::float8 / 1000)),
  (SELECT extract(epoch FROM min(s.lease_expires_at) - clock_timestamp()) * 1000
     FROM threadwarden.hosts h
     JOIN threadwarden.threads t ON t.host_id = h.host_id
     JOIN threadwarden.submissions s ON s.thread_id = t.thread_id
    WHERE h.alarm_at < clock_timestamp() - make_interval(secs => $1::float8 / 1000)
      AND s.state = 'running' AND s.lease_expires_at > clock_timestamp())
)::float8 AS due_in_ms
"""
"""Milliseconds (by the database's clock) until some host the sweep skipped becomes overdue: the
earliest alarm not yet overdue by the grace ($1 ms) reaches it, or the earliest live lease on an
overdue host lapses. NULL when no host is armed at all. No sequential scan: ``hosts_alarm_at``
for the alarms, ``submissions_lane`` or ``threads_host`` for the leases (the planner picks)."""


class SweepScan(BaseModel):
    """One sweep's view of the ledger."""

    overdue: list[str]
    """Hosts to wake now, oldest alarm first."""
    next_due_ms: int | None
    """How soon another host will be overdue (0 = already); None when no alarm is armed."""


class Sweeps:
    """The sweeper's reads; one connection per scan, never two at once."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def scan(self, *, grace_ms: int, limit: int) -> SweepScan:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(OVERDUE, grace_ms, limit)
            due = await conn.fetchval(NEXT_DUE, grace_ms)
        return SweepScan(
            overdue=[r["host_id"] for r in rows],
            next_due_ms=None if due is None else max(0, math.ceil(due)),
        )

    async def overdue_hosts(self, *, grace_ms: int, limit: int) -> list[str]:
        """Hosts whose alarm is overdue by more than ``grace_ms``: the sweeper wakes them.

        A host with a live attempt lease is being served right now (its pass pre-armed the
        alarm before the attempt began); it is skipped until the lease lapses.
        """
        rows = await self._pool.fetch(OVERDUE, grace_ms, limit)
        return [r["host_id"] for r in rows]
