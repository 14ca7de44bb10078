"""Live text, the writer's half: fragments of a model response while it is generated, off the
journal.

A worker's attempt writes each coalesced fragment with `Deltas.write`: one statement that
appends it to the step's row of ``threadwarden.deltas`` (an unlogged table) and NOTIFYs
`DELTA_CHANNEL` with the fragment and its offset in the step's text. Once the step's response is
journaled the row goes (`Deltas.clear`). Readers read the rows and the notifications with
`threadwarden.reading.text`.
"""

from __future__ import annotations

from typing import Any

import asyncpg

DELTA_CHANNEL = "threadwarden_deltas"
"""The NOTIFY channel of live text (records: `threadwarden.ledger.records.COMMITTED_CHANNEL`)."""
NOTIFY_TEXT_BYTES = 6_000
"""A longer fragment is announced without its text (NOTIFY payloads end at 8,000 bytes): readers
read the row instead (`threadwarden.reading.text.text_so_far`)."""

_WRITE = """
WITH up AS (
  INSERT INTO threadwarden.deltas AS d (submission_id, step, thread_id, epoch, text)
  VALUES ($1, $2, $3, $4, $5)
  ON CONFLICT (submission_id, step) DO UPDATE
     SET text = CASE WHEN d.epoch = EXCLUDED.epoch THEN d.text || EXCLUDED.text
                     ELSE EXCLUDED.text END,
         epoch = EXCLUDED.epoch, updated_at = clock_timestamp()
   WHERE d.epoch <= EXCLUDED.epoch
  RETURNING char_length(d.text) AS total
)
SELECT pg_notify($6, json_build_object(
         'thread_id', $3::text, 'submission_id', $1::text, 'step', $2::int, 'epoch', $4::bigint,
         'offset', total - char_length($5),
         'text', CASE WHEN octet_length($5) <= $7 THEN $5 END)::text)
  FROM up
"""
"""Append a fragment to its step's text (a new epoch starts the text again: a re-run after a
cut-off attempt; an older one's late write changes and announces nothing) and announce it, in
one statement."""


class Deltas:
    """Writes of live text."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def write(
        self, thread_id: str, submission_id: str, step: int, epoch: int, text: str
    ) -> None:
        """Append ``text`` to the step's text and announce it."""
        await self._pool.execute(
            _WRITE, submission_id, step, thread_id, epoch, text, DELTA_CHANNEL, NOTIFY_TEXT_BYTES
        )

    async def clear(self, submission_id: str, step: int) -> None:
        """The step's response is journaled: its live text may go."""
        await self._pool.execute(
            "DELETE FROM threadwarden.deltas WHERE submission_id = $1 AND step = $2",
            submission_id,
            step,
        )
