"""The ledger's gauges for the metrics endpoint: one read-only statement, run at most every few
seconds per worker (never per pass)."""

from __future__ import annotations

from typing import Any

import asyncpg
from pydantic import BaseModel

NONTERMINAL_STATES = (
    "admitted",
    "ready",
    "running",
    "input-applied",
    "terminalizing",
    "suspended",
    "unknown",
)
"""Every state but ``settled``; ``suspended`` waits for an approval, ``unknown`` for an
operator's decision on a side effect."""

GAUGES = f"""
SELECT {", ".join(f"count(*) FILTER (WHERE s.state = '{state}')" for state in NONTERMINAL_STATES)},
       (SELECT extract(epoch FROM clock_timestamp() - min(h.alarm_at))::float8
          FROM threadwarden.hosts h
         WHERE h.alarm_at IS NOT NULL AND h.alarm_at < clock_timestamp()),
       (SELECT count(*) FROM threadwarden.publications),
       (SELECT count(*) FROM threadwarden.messages m WHERE m.state = 'pending')
  FROM threadwarden.submissions s
 WHERE s.state <> 'settled'
"""
"""Nonterminal submissions by state (the partial index ``submissions_lane``), how long the
oldest overdue alarm is overdue (``hosts_alarm_at``), the outbox backlog (``publications_due``:
a row is deleted once published) and the pending messages (the partial index ``messages_due``).
The state names are constants of this module, not values."""


class LedgerGauges(BaseModel):
    """One reading of the gauges."""

    submissions: dict[str, int]
    """Nonterminal submissions by state (every state of `NONTERMINAL_STATES`)."""
    oldest_overdue_alarm_s: float
    """How long the earliest alarm in the past is overdue; 0 when none is."""
    outbox_backlog: int
    """Records not yet published to every sink."""
    message_backlog: int
    """Messages between threads not yet delivered (``pending``)."""


async def read_gauges(pool: asyncpg.Pool[Any]) -> LedgerGauges:
    """Read the gauges in one statement."""
    row = await pool.fetchrow(GAUGES)
    assert row is not None  # an aggregate always returns its row
    states = len(NONTERMINAL_STATES)
    return LedgerGauges(
        submissions={state: int(row[i]) for i, state in enumerate(NONTERMINAL_STATES)},
        oldest_overdue_alarm_s=max(0.0, float(row[states] or 0.0)),
        outbox_backlog=int(row[states + 1]),
        message_backlog=int(row[states + 2]),
    )
