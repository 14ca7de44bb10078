"""The mutation gate: every native mutation bumps its host's ``dirty`` generation and ensures
its alarm (keeping an earlier one) in its own transaction (docs/protocol.md)."""

from __future__ import annotations

from threadwarden.ledger.pool import Connection

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
