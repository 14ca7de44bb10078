"""An attempt's live text (`JournaledContext.text_delta`): fragments of the step in progress,
coalesced and written off the journal (`threadwarden.ledger.deltas`).

The first fragment of a step is written `FIRST_S` after it arrives (the reader's first words
come quickly); the next ones are coalesced and written at most every `FLUSH_S`, so a step
costs about 20 statements a second however fast its model streams. A write that fails is
dropped and logged: live text is a courtesy to readers, never a reason to slow or fail the
attempt. When the step's response is about to be journaled what is pending is written
(`flush`), and once it is the row goes (`finish`); a step whose whole response came within
`FIRST_S` writes no live text at all (its record carries it, and costs no statement more).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from threadwarden.ledger.claims import Claim
from threadwarden.ledger.deltas import Deltas

logger = logging.getLogger(__name__)

FIRST_S = 0.02
"""How long a step's first fragment waits for more before it is written: a quick model's whole
response arrives within it, and the step writes nothing but its journaled record."""
FLUSH_S = 0.05
"""The most often a step's coalesced fragments are written (about 20 a second)."""


class LiveText:
    """The live text of one attempt."""

    def __init__(self, deltas: Deltas, claim: Claim) -> None:
        self._deltas = deltas
        self._claim = claim
        self._pending: dict[int, str] = {}
        self._written: set[int] = set()
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def add(self, step: int, text: str) -> None:
        """Queue ``text`` for ``step``; written within `FLUSH_S` (the step's first within
        `FIRST_S`)."""
        self._pending[step] = self._pending.get(step, "") + text
        if self._flusher is None or self._flusher.done():
            delay = FLUSH_S if step in self._written else FIRST_S
            self._flusher = asyncio.create_task(self._flush_after(delay))

    async def flush(self, step: int) -> None:
        """Before ``step``'s response is journaled. A step whose text reached readers gets what
        is pending written, after a write under way (a reader gets the step's last words before
        its record, and no late write brings back a row `finish` removed); a step none of whose
        text was written yet writes none (its record comes whole, a statement saved)."""
        async with self._lock:
            if step not in self._written:
                self._pending.pop(step, None)
                return
        await self._flush()

    async def finish(self, step: int) -> None:
        """The step's response is journaled: its row goes."""
        if step not in self._written:
            return
        self._written.discard(step)
        with contextlib.suppress(Exception):  # stale rows are replaced by the next epoch anyway
            await self._deltas.clear(self._claim.submission_id, step)

    async def close(self, *, keep: bool) -> None:
        """The attempt ends: stop writing. Unless ``keep`` (an attempt cut off by a deploy, a
        lost lease or its time: readers keep its text so far until the re-run starts the step
        over), remove the rows of steps it never journaled (the binding failed mid-step: no
        reader is to see them again). A crashed worker never gets here; its rows are replaced
        by the re-run's text, and readers never read a settled submission's."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if keep:
            return
        async with self._lock:
            self._pending.clear()
            left, self._written = self._written, set()
            for step in sorted(left):
                with contextlib.suppress(Exception):
                    await self._deltas.clear(self._claim.submission_id, step)

    async def _flush_after(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            pending, self._pending = self._pending, {}
            for step, text in pending.items():
                try:
                    await self._deltas.write(
                        self._claim.thread_id,
                        self._claim.submission_id,
                        step,
                        self._claim.epoch,
                        text,
                    )
                    self._written.add(step)
                except Exception as error:  # a courtesy to readers: never the attempt's fault
                    logger.debug("live text of %s dropped: %r", self._claim.submission_id, error)
