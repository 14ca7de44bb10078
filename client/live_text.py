"""Live text (issue 31): the fragments of the text a model generates for a journal step, shown to
a reader among the thread's records, each step's text once and before the record that closes it.

`LiveText` keeps one reader's order across its connections (`threadwarden.client.feed`'s
`follow_thread` with ``text``); `DeltaNotes` LISTENs on `DELTA_CHANNEL` on the reader's
connection. `NotedDeltas` and `new_text` are also the console's (`threadwarden.console.feed`),
whose readers share one listening connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

from threadwarden.client.listening import unlisten
from threadwarden.ledger.deltas import (
    DELTA_CHANNEL,
    Delta,
    Deltas,
    DeltaTracker,
    Resync,
    parse_notification,
)
from threadwarden.ledger.pool import Connection
from threadwarden.ledger.status import records_after

MAX_QUEUED_DELTAS = 256
"""Live-text notifications a reader keeps between its reads; past that it reads the rows instead."""


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


class NotedDeltas:
    """The live-text fragments notified for one reader since it last took them: at most
    `MAX_QUEUED_DELTAS`, past which it reads the rows instead (``overflow``)."""

    def __init__(self) -> None:
        self._queue: list[Delta] = []
        self.overflow = False

    def add(self, delta: Delta) -> None:
        """Keep a notified fragment (or, for a slow reader, note that one was dropped)."""
        if len(self._queue) < MAX_QUEUED_DELTAS:
            self._queue.append(delta)
        else:
            self.overflow = True

    def take(self) -> list[Delta]:
        """The fragments notified since the last take, in order."""
        taken, self._queue = self._queue, []
        return taken

    def overflowed(self) -> bool:
        """Whether a fragment was dropped since the last call (then read the rows)."""
        overflow, self.overflow = self.overflow, False
        return overflow


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


_Key = tuple[str, int]
"""A streaming step: its submission and journal step."""

_RESULT_STEPS = (
    "SELECT sequence, step FROM threadwarden.records"
    " WHERE thread_id = $1 AND sequence = ANY($2::bigint[])"
)


class DeltaNotes(NotedDeltas):
    """LISTEN on `DELTA_CHANNEL` on a reader's own connection: the thread's fragments notified
    since the reader last took them (each one also ``poke``s the reader)."""

    def __init__(self, conn: Connection, thread_id: str, poke: Callable[[], None]) -> None:
        super().__init__()
        self._conn = conn
        self._thread_id = thread_id
        self._poke = poke

    def _on_delta(self, *args: Any) -> None:
        parsed = parse_notification(str(args[-1]))
        if parsed is None or parsed[0] != self._thread_id:
            return
        self.add(parsed[1])
        self._poke()

    async def __aenter__(self) -> DeltaNotes:
        await self._conn.add_listener(DELTA_CHANNEL, self._on_delta)
        return self

    async def __aexit__(self, *_: object) -> None:
        await unlisten(self._conn, DELTA_CHANNEL, self._on_delta)

    def put_back(self, deltas: list[Delta]) -> None:
        """Keep ``deltas`` for the next round (ahead of newer ones), which comes at once."""
        if deltas:
            self._queue[:0] = deltas
            self._poke()


class LiveText:
    """What one reader showed of the thread's live text, across its connections; each round
    reads the records and places the text among them.

    The order it keeps: a step's fragments come before the record that closes the step (its
    ``tool-result``, or the submission's ``settlement`` if the step never completed), since the
    worker writes a step's last words before it journals the response. A round takes the
    fragments notified before it reads the records (all committed before that read) and shows
    them, each before the record of this read that closes its step, else after the records;
    of the fragments notified while it read (Postgres sends every notification committed before
    the statement ended ahead of its result), it shows those whose step closes in this read and
    keeps the others for the next round, after the next read, so that no text comes before a
    record committed before it. What is new of each fragment (once, with ``restart`` when a
    step starts over) is the `DeltaTracker`'s to say; a fragment it cannot place sends the
    round to the rows (`Deltas.so_far`).

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
        self, conn: Connection, notes: DeltaNotes, after: int, *, catch_up: bool
    ) -> list[dict[str, Any] | TextDelta]:
        """The records above ``after`` with the live text to show among them; with
        ``catch_up`` (a new connection), first the text so far of each streaming step."""
        rows = await Deltas.so_far(conn, self._thread_id) if catch_up else []
        early = notes.take()
        records = await records_after(conn, self._thread_id, after)
        during = notes.take()
        closes, settles = await self._closes(conn, records, [*rows, *early, *during])
        notes.put_back([d for d in during if _key(d) not in closes])
        # A step that closes here and that the reader showed nothing of: its record says it.
        self._closed |= {_key(r) for r in rows if _key(r) in closes} - set(self._epochs)
        fresh = self._tracker.catch_up(self._current(rows))
        overflow = notes.overflowed()
        applied, unplaced = new_text(
            self._tracker, self._current([*early, *(d for d in during if _key(d) in closes)])
        )
        fresh += applied
        if unplaced or overflow:
            # Read the rows (of the steps still streaming: its record says a closed one).
            rows = await Deltas.so_far(conn, self._thread_id)
            # Of the steps this round knows: one that began since may not have its record yet.
            rows = [r for r in rows if _key(r) in self._epochs]
            fresh += self._tracker.catch_up(self._current(rows))
        return self._placed(records, fresh, closes, settles)

    async def _closes(
        self, conn: Connection, records: list[dict[str, Any]], deltas: list[Delta]
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
            rows = await conn.fetch(_RESULT_STEPS, self._thread_id, results)
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
    ) -> list[dict[str, Any] | TextDelta]:
        """The records, each after the text of the steps it closes; the other text after them.
        The steps closed are forgotten (their late notifications are ignored)."""
        before: dict[int, list[TextDelta]] = {}
        rest: list[TextDelta] = []
        for delta in fresh:
            index = closes.get(_key(delta))
            (rest if index is None else before.setdefault(index, [])).append(text_delta(delta))
        placed: list[dict[str, Any] | TextDelta] = []
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
