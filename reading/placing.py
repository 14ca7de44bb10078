"""Where live text goes among a thread's records: one way, for every reader (`TextPlacer`).

A step's live text is shown after the record that opens its step (its ``tool-call``, journaled
before the step runs) and before the record that closes it (its ``tool-result``, or the
submission's ``settlement`` if the step never completed): the worker journals the opening
before its first fragment and writes its last words before it journals the response.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import asyncpg

from threadwarden.ledger.pool import Connection
from threadwarden.ledger.status import records_after
from threadwarden.reading.text import (
    Delta,
    DeltaTracker,
    NotedDeltas,
    TextDelta,
    new_text,
    text_delta,
    text_so_far,
)

Reads: TypeAlias = "Connection | asyncpg.Pool[Any]"
"""Where a reader reads: its own connection, or a pool (a statement at a time)."""
Item = dict[str, Any] | TextDelta
"""What a reader shows: a record (as `records_after` reads it) or live text."""

_Key = tuple[str, int]
"""A streaming step: its submission and journal step."""

_RESULT_STEPS = (
    "SELECT sequence, step FROM threadwarden.records"
    " WHERE thread_id = $1 AND sequence = ANY($2::bigint[])"
)


class TextPlacer:
    """What one reader showed of the thread's live text, across its reads (and connections);
    each round reads the records and places the text among them.

    A fragment is shown only once every record committed before it was read: the fragments
    notified before a round reads the records (all committed before that read, and so after
    their step's opening) go after the records, or before the record of this read that closes
    their step; of those notified while it read (Postgres sends every notification committed
    before the statement ended ahead of its result), it shows those whose step closes in this
    read and keeps the others for the next round. So does the text so far a (re)connecting
    reader reads before the records (``catch_up``). A read cut at ``limit`` may have left out
    records committed before the text: it shows only the text of steps that close in it, and
    keeps the rest, and the rows still to catch up, for the round that reads to the end. What
    is new of each fragment (once, with ``restart`` when a step starts over) is the
    `DeltaTracker`'s to say; a fragment it cannot place sends the round to the rows.

    Text it never shows: a fragment of an older attempt than one it saw (a late notification
    of a cut-off attempt), of a step already closed, or of a step that closed before the reader
    showed any of it (it completed before the reader arrived: its record says it all).
    """

    def __init__(self, thread_id: str) -> None:
        self._thread_id = thread_id
        self._tracker = DeltaTracker()
        self._epochs: dict[_Key, int] = {}
        """The latest attempt seen of each step the reader follows."""
        self._closed: set[_Key] = set()
        self._settled: set[str] = set()
        """Submissions the reader saw settle while it followed (or had text of theirs)."""

    async def round(
        self,
        reads: Reads,
        notes: NotedDeltas,
        after: int,
        *,
        catch_up: bool,
        read: bool = True,
        limit: int | None = None,
    ) -> tuple[list[Item], bool]:
        """The records above ``after`` (at most ``limit``) with the live text to show among
        them, and whether the read reached the last record (else read again at once, still
        owing the ``catch_up``). With ``catch_up`` (a new reader or connection), first the text
        so far of each streaming step. Without ``read`` only the notified text: for a reader
        that has read every record notified before it (a record's notification comes before
        its step's first fragment's)."""
        rows = await text_so_far(reads, self._thread_id) if catch_up else []
        early = notes.take()
        records = await records_after(reads, self._thread_id, after, limit=limit) if read else []
        during = notes.take()
        closes, settles = await self._closes(reads, records, [*rows, *early, *during])
        complete = limit is None or len(records) < limit
        if not complete:  # a record committed before this text may be past the read
            rows = [r for r in rows if _key(r) in closes]
            notes.put_back([d for d in [*early, *during] if _key(d) not in closes])
            early = [d for d in early if _key(d) in closes]
        else:
            notes.put_back([d for d in during if _key(d) not in closes])
        # A step that closes here and that the reader showed nothing of: its record says it.
        self._closed |= {_key(r) for r in rows if _key(r) in closes} - set(self._epochs)
        fresh = self._tracker.catch_up(self._current(rows))
        overflow = complete and notes.overflowed()
        applied, unplaced = new_text(
            self._tracker, self._current([*early, *(d for d in during if _key(d) in closes)])
        )
        fresh += applied
        if unplaced or overflow:
            # Read the rows (of the steps still streaming: its record says a closed one), of
            # the steps this round knows: one that began since may not have its record read.
            rows = await text_so_far(reads, self._thread_id)
            known = [r for r in rows if _key(r) in self._epochs]
            fresh += self._tracker.catch_up(self._current(known))
        return self._placed(records, fresh, closes, settles), complete

    async def _closes(
        self, reads: Reads, records: list[dict[str, Any]], deltas: list[Delta]
    ) -> tuple[dict[_Key, int], set[str]]:
        """Which of the steps of ``deltas`` and of those followed close in ``records`` (each
        with the index of the record that closes it), and which of their submissions settle."""
        keys = {_key(d) for d in deltas} | set(self._epochs)
        submissions = {key[0] for key in keys}
        results = [
            r["sequence"]
            for r in records
            if r["kind"] == "tool-result" and r["submission_id"] in submissions
        ]
        steps: dict[int, int] = {}
        if results:
            rows = await reads.fetch(_RESULT_STEPS, self._thread_id, results)
            steps = {row["sequence"]: row["step"] for row in rows if row["step"] is not None}
        closes: dict[_Key, int] = {}
        settles: dict[str, int] = {}
        for index, record in enumerate(records):
            step = steps.get(record["sequence"])
            if step is not None:
                closes.setdefault((record["submission_id"], step), index)
            elif record["kind"] == "settlement" and record["submission_id"] in submissions:
                settles.setdefault(record["submission_id"], index)
        for key in keys:  # a step that never completed closes with its submission
            if key[0] in settles:
                closes.setdefault(key, settles[key[0]])
        return closes, set(settles)

    def _current(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` less those of a closed step or of an older attempt than one seen."""
        current = []
        for delta in deltas:
            key = _key(delta)
            if key in self._closed or delta.submission_id in self._settled:
                continue
            if delta.epoch < self._epochs.get(key, delta.epoch):
                continue
            self._epochs[key] = delta.epoch
            current.append(delta)
        return current

    def _placed(
        self,
        records: list[dict[str, Any]],
        fresh: list[Delta],
        closes: dict[_Key, int],
        settles: set[str],
    ) -> list[Item]:
        """The records, each after the text of the steps it closes; the other text after them.
        The steps closed are forgotten (their late notifications are ignored)."""
        before: dict[int, list[TextDelta]] = {}
        rest: list[TextDelta] = []
        for delta in fresh:
            index = closes.get(_key(delta))
            (rest if index is None else before.setdefault(index, [])).append(text_delta(delta))
        placed: list[Item] = []
        for index, record in enumerate(records):
            placed += before.get(index, [])
            placed.append(record)
        self._settled |= settles
        self._closed |= set(closes)
        for key in [key for key in self._epochs if key in closes or key[0] in settles]:
            del self._epochs[key]
            self._tracker.done(*key)
        return placed + rest


def _key(delta: Delta) -> _Key:
    return delta.submission_id, delta.step
