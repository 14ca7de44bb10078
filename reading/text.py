"""Live text as readers get it (issue 31): the fragments of the text a model generates for a
journal step, notified on `DELTA_CHANNEL` as a worker writes them (`threadwarden.ledger.deltas`).

A reader first reads the text so far (`text_so_far`), then applies each notification whose
offset it has reached (`DeltaTracker`): the concatenation of what it shows is the step's text,
once. A notification it cannot place (its offset past what the reader has, or a text too long
for a NOTIFY) sends it back to the rows. `NotedDeltas` keeps the fragments notified for one
reader between its reads. Where the text goes among the records is `threadwarden.reading.placing`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.ledger.pool import Connection

MAX_QUEUED_DELTAS = 256
"""Live-text notifications a reader keeps between its reads; past that it reads the rows instead."""

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
    """None when the fragment was too long to announce: read the row (`text_so_far`)."""
    restart: bool = False
    """The step started over (a re-run after a cut-off attempt): what a reader showed of it
    before is not part of its text; this fragment begins it again."""


class TextDelta(BaseModel):
    """A fragment of the text a model generates for a journal step, live (issue 31): never a
    record. The fragments of a step concatenate to its text, once; its journaled response (the
    step's ``tool-result`` record) is the text the application keeps."""

    submission_id: str
    step: int
    """The journal step whose model request streams."""
    text: str
    """The new fragment (for a reader that arrived mid-step, first the text so far)."""
    restart: bool = False
    """The step started over (a re-run after a cut-off attempt): what was shown of it before is
    not part of its text; this fragment begins it again."""


def text_delta(delta: Delta) -> TextDelta:
    """A fragment to show (from `DeltaTracker`) as readers get it."""
    return TextDelta(
        submission_id=delta.submission_id,
        step=delta.step,
        text=delta.text or "",
        restart=delta.restart,
    )


def parse_notification(payload: str) -> tuple[str, Delta] | None:
    """A `DELTA_CHANNEL` payload as its thread and fragment (None if it is not one)."""
    try:
        note: dict[str, Any] = json.loads(payload)
        return str(note["thread_id"]), Delta.model_validate(note)
    except (ValueError, KeyError, TypeError):
        return None


async def text_so_far(conn: Connection | asyncpg.Pool[Any], thread_id: str) -> list[Delta]:
    """The text so far of each of the thread's steps that stream now (whole, offset 0)."""
    rows = await conn.fetch(_SO_FAR, thread_id)
    return [Delta(**dict(row)) for row in rows]


class DeltaTracker:
    """What one reader has shown of each streaming step, so that the concatenation of the
    fragments it shows is each step's text once, whatever order notifications and reads come in.

    `catch_up` takes the rows (`text_so_far`) and returns what is new in them; `apply` takes
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


def new_text(tracker: DeltaTracker, deltas: Iterable[Delta]) -> tuple[list[Delta], bool]:
    """What ``tracker`` says is new of each of ``deltas``, in order, and whether one of them
    could not be placed (`Resync`: read the rows, `DeltaTracker.catch_up`)."""
    fresh: list[Delta] = []
    unplaced = False
    for delta in deltas:
        try:
            shown = tracker.apply(delta)
        except Resync:
            unplaced = True
            continue
        if shown is not None:
            fresh.append(shown)
    return fresh, unplaced


class NotedDeltas:
    """The live-text fragments notified for one reader since it last took them: at most
    `MAX_QUEUED_DELTAS`, past which it reads the rows instead (``overflow``). ``poke`` wakes
    the reader (a fragment to show, or one put back for its next round)."""

    def __init__(self, poke: Callable[[], None]) -> None:
        self._queue: list[Delta] = []
        self._poke = poke
        self.overflow = False

    def add(self, delta: Delta) -> None:
        """Keep a notified fragment (or, for a slow reader, note that one was dropped)."""
        if len(self._queue) < MAX_QUEUED_DELTAS:
            self._queue.append(delta)
        else:
            self.overflow = True
        self._poke()

    @property
    def pending(self) -> bool:
        """Whether fragments wait to be taken (or one was dropped: read the rows)."""
        return bool(self._queue) or self.overflow

    def take(self) -> list[Delta]:
        """The fragments notified since the last take, in order."""
        taken, self._queue = self._queue, []
        return taken

    def put_back(self, deltas: list[Delta]) -> None:
        """Keep ``deltas`` for the next round (ahead of newer ones), which comes at once."""
        if deltas:
            self._queue[:0] = deltas
            self._poke()

    def overflowed(self) -> bool:
        """Whether a fragment was dropped since the last call (then read the rows)."""
        overflow, self.overflow = self.overflow, False
        return overflow
