"""Live text: fragments of a model response while it is generated, off the journal.

A worker's attempt writes each coalesced fragment with `Deltas.write`: one statement that
appends it to the step's row of ``threadwarden.deltas`` (an unlogged table) and NOTIFYs
`DELTA_CHANNEL` with the fragment and its offset in the step's text. A reader first reads the
text so far (`Deltas.so_far`), then applies each notification whose offset it has reached: the
concatenation of what it shows is the step's text, once. A notification it cannot place (its
offset past what the reader has, or a text too long for a NOTIFY) sends it back to the row.
Once the step's response is journaled the row goes (`Deltas.clear`).
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.ledger.pool import Connection

DELTA_CHANNEL = "threadwarden_deltas"
"""The NOTIFY channel of live text (records: `threadwarden.ledger.publication.NOTIFY_CHANNEL`)."""
NOTIFY_TEXT_BYTES = 6_000
"""A longer fragment is announced without its text (NOTIFY payloads end at 8,000 bytes): readers
read the row instead."""

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

_SO_FAR = """
SELECT d.submission_id, d.step, d.epoch, d.text
  FROM threadwarden.deltas d
  JOIN threadwarden.submissions s ON s.submission_id = d.submission_id
 WHERE d.thread_id = $1 AND s.state <> 'settled'
   AND NOT EXISTS (
     SELECT 1 FROM threadwarden.records r
      WHERE r.submission_id = d.submission_id COLLATE "default" AND r.step = d.step
        AND r.kind = 'tool-result')
 ORDER BY d.updated_at
"""
"""The text so far of the thread's steps that still stream: not of a settled submission, nor
of a step whose response is journaled (a row a crash left behind before its clear)."""


class Delta(BaseModel):
    """A fragment of a step's text: ``text`` starts at ``offset`` characters into it."""

    submission_id: str
    step: int
    epoch: int
    offset: int = 0
    text: str | None
    """None when the fragment was too long to announce: read the row (`Deltas.so_far`)."""
    restart: bool = False
    """The step started over (a re-run after a cut-off attempt): what a reader showed of it
    before is not part of its text; this fragment begins it again."""


def parse_notification(payload: str) -> tuple[str, Delta] | None:
    """A `DELTA_CHANNEL` payload as its thread and fragment (None if it is not one)."""
    try:
        note: dict[str, Any] = json.loads(payload)
        return str(note["thread_id"]), Delta.model_validate(note)
    except (ValueError, KeyError, TypeError):
        return None


class Deltas:
    """Writes and reads of live text."""

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

    @staticmethod
    async def so_far(conn: Connection, thread_id: str) -> list[Delta]:
        """The text so far of each of the thread's steps that stream now (whole, offset 0)."""
        rows = await conn.fetch(_SO_FAR, thread_id)
        return [Delta(**dict(row)) for row in rows]


class DeltaTracker:
    """What one reader has shown of each streaming step, so that the concatenation of the
    fragments it shows is each step's text once, whatever order notifications and reads come in.

    `catch_up` takes the rows (`Deltas.so_far`) and returns what is new in them; `apply` takes
    one notification and returns the fragment to show (None: nothing new), or raises `Resync`
    when it cannot place it (then `catch_up` from the rows). A new epoch for a step (a re-run
    after a cut-off attempt) starts that step's text again: its fragment comes at offset 0.
    """

    def __init__(self) -> None:
        self._shown: dict[tuple[str, int], tuple[int, int]] = {}

    def catch_up(self, rows: list[Delta]) -> list[Delta]:
        """The unseen part of each row's text (a new epoch: all of it)."""
        fresh = []
        for row in rows:
            key = (row.submission_id, row.step)
            epoch, shown = self._shown.get(key, (row.epoch, 0))
            if row.epoch < epoch:  # an older attempt's text: the reader is past it
                continue
            restart = epoch != row.epoch and shown > 0
            if epoch != row.epoch:
                shown = 0
            text = row.text or ""
            if len(text) > shown:
                update = {"offset": shown, "text": text[shown:], "restart": restart}
                fresh.append(row.model_copy(update=update))
            self._shown[key] = (row.epoch, max(shown, len(text)))
        return fresh

    def apply(self, delta: Delta) -> Delta | None:
        """The part of a notified fragment this reader has not shown yet."""
        key = (delta.submission_id, delta.step)
        epoch, shown = self._shown.get(key, (delta.epoch, 0))
        restart = False
        if delta.epoch < epoch:  # a late fragment of an older attempt: not the step's text
            return None
        if epoch != delta.epoch:  # a re-run's text starts again
            epoch, restart, shown = delta.epoch, shown > 0, 0
        if delta.text is None or delta.offset > shown:
            raise Resync
        new = delta.text[shown - delta.offset :]
        self._shown[key] = (epoch, max(shown, delta.offset + len(delta.text)))
        update = {"offset": shown, "text": new, "restart": restart}
        return delta.model_copy(update=update) if new else None

    def done(self, submission_id: str, step: int) -> None:
        """The step's response is journaled: forget it (the caller shows no later fragment of
        a closed step)."""
        self._shown.pop((submission_id, step), None)


class Resync(Exception):
    """A fragment a reader cannot place: it reads the rows again (`DeltaTracker.catch_up`)."""
