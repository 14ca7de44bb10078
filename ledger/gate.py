"""The mutation gate: every native mutation bumps its host's ``dirty`` generation and ensures
its alarm (keeping an earlier one) in its own transaction (docs/protocol.md). One statement text
for it (`host_gate`), used by `mark_dirty` and by an admission's write (`ledger/admission.py`)."""

from __future__ import annotations

from threadwarden.ledger.pool import Connection


def host_gate(
    host: str, delay: str, *, bump: str = "1", new_work: str = "0", source: str = ""
) -> str:
    """The mutation gate on one host's row, as two CTEs of a statement. ``armed``: now +
    ``delay`` ms, the latest alarm the mutation needs. ``h``: locks the host's row (hosts first,
    the lock order everywhere), adds ``bump`` to its ``dirty`` generation and ``new_work`` to
    its count of unsettled submissions, keeps the earlier of its alarm and ``armed``, and
    creates the row for a new host (whose generation then starts at 1 + ``bump``, as though it
    had existed clean). ``h`` returns ``host_id``, ``dirty`` and ``already_armed`` (an alarm at
    least as early was set, so a wake can be skipped). ``host`` is the host id's SQL, read from
    ``source`` when given (a FROM item: no row there, no write)."""
    source_item = f", {source}" if source else ""
    return f"""armed AS (
  SELECT clock_timestamp() + make_interval(secs => {delay}::float8 / 1000) AS at
), h AS (
  INSERT INTO threadwarden.hosts AS h (host_id, dirty, nonterminal, alarm_at)
  SELECT {host}, 1 + {bump}, {new_work}, at FROM armed{source_item}
  ON CONFLICT (host_id) DO UPDATE
     SET dirty = h.dirty + {bump}, nonterminal = h.nonterminal + {new_work},
         alarm_at = LEAST(h.alarm_at, EXCLUDED.alarm_at), updated_at = clock_timestamp()
  RETURNING h.host_id, h.dirty, h.alarm_at < (SELECT at FROM armed) AS already_armed
)"""


_MARK_DIRTY = (
    f"WITH {host_gate('$1', '$3', bump='CASE WHEN $2 THEN 1 ELSE 0 END')} SELECT dirty FROM h"
)


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
