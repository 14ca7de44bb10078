"""Host work marks: a durable "the host plug-in has work due at T" on the host row.

The original's host obligations mutate through the mutation gate without invalidating recovery:
the alarm is armed in the same transaction as the obligation, the host is not made dirty. Here
the mark is ``hosts.host_work_due_at``, set in one statement with ``alarm_at`` (ensure-by, an
earlier alarm is kept). Every step that sets the alarm reads the mark with the host row under
its lock (`threadwarden.ledger.deadlines.DEADLINES`), so a pass that finishes while a mark commits
can never clear the alarm the mark armed. The first host wave of a pass that finds the mark due
takes it; a wave that fails or is cut off puts it back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from threadwarden.errors import NotFound
from threadwarden.ledger.pool import Connection

_MARK = """
WITH armed AS (
  SELECT GREATEST(COALESCE($2::timestamptz, clock_timestamp()),
                  clock_timestamp() + make_interval(secs => $3::float8 / 1000)) AS at
)
UPDATE threadwarden.hosts h
   SET host_work_due_at = LEAST(h.host_work_due_at, COALESCE($2::timestamptz, clock_timestamp())),
       alarm_at = LEAST(h.alarm_at, armed.at),
       updated_at = clock_timestamp()
  FROM armed
 WHERE h.host_id = $1
RETURNING h.alarm_at = armed.at AS moved
"""
"""Mark the work due (keeping an earlier mark) and ensure-by the alarm, in one statement; the
host is not made dirty. ``updated_at`` moves so that an optimistic finish that read the row
before the mark decides again."""

_TAKE = """
UPDATE threadwarden.hosts h SET host_work_due_at = NULL
  FROM (SELECT host_work_due_at AS was FROM threadwarden.hosts
         WHERE host_id = $1 AND host_work_due_at <= clock_timestamp() FOR UPDATE) taken
 WHERE h.host_id = $1
RETURNING taken.was
"""
"""Take a due mark (a mark for later stays); returns what was taken, to put back on failure."""


async def mark_host_work_due(
    conn: Connection, host_id: str, at: datetime | None = None, *, minimum_alarm_delay_ms: int
) -> bool:
    """Inside the caller's transaction: record host work due at ``at`` (now when None).

    Returns True when the alarm moved earlier (then a wake after commit is worth sending).
    Raises `NotFound` for a host that does not exist.
    """
    moved = await conn.fetchval(_MARK, host_id, at, minimum_alarm_delay_ms)
    if moved is None:
        raise NotFound(f"host: no host {host_id!r}")
    return bool(moved)


class HostWork:
    """Marks of host work on the host rows."""

    def __init__(self, pool: asyncpg.Pool[Any], *, minimum_alarm_delay_ms: int) -> None:
        self._pool = pool
        self._minimum_alarm_delay_ms = minimum_alarm_delay_ms

    async def mark_due(self, host_id: str, at: datetime | None = None) -> bool:
        """Record host work due at ``at`` (now when None) in its own statement; True when the
        alarm moved earlier."""
        async with self._pool.acquire() as conn:
            return await mark_host_work_due(
                conn, host_id, at, minimum_alarm_delay_ms=self._minimum_alarm_delay_ms
            )

    async def take_due(self, host_id: str) -> datetime | None:
        """Take the host's mark if it has come (on the database's clock)."""
        value = await self._pool.fetchval(_TAKE, host_id)
        return value if isinstance(value, datetime) else None

    async def put_back(self, host_id: str, taken: datetime) -> None:
        """Restore a mark whose wave failed or was cut off (an earlier mark is kept)."""
        await self.mark_due(host_id, taken)
