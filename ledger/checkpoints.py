"""Framework checkpoints: opaque state a binding saves under its attempt's fence and resumes from.

An agent framework with a resumable loop (LangGraph) saves its checkpoints here instead of in
a store of its own: every save is checked against the attempt's ownership (a zombie attempt
saves nothing), remembers the journal position it was saved at, and may append canonical
records in the same transaction (what the saved step did, for ``watch`` and the console).
Only bindings that save checkpoints read them: no attempt pays for this table otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict

from threadwarden.bindings import ThreadRecord
from threadwarden.ledger.attempts import append_in, fence
from threadwarden.ledger.claims import Claim


class CheckpointRow(BaseModel):
    """One saved checkpoint, as a binding reads it back."""

    model_config = ConfigDict(frozen=True)

    submission_id: str
    step: int
    meta: Any
    data: bytes
    carry: bool


_INSERT = """
INSERT INTO threadwarden.checkpoints (thread_id, submission_id, epoch, step, carry, meta, data)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)
"""
OF_SUBMISSION = """
SELECT submission_id, step, meta, data, carry FROM threadwarden.checkpoints
 WHERE submission_id = $1 ORDER BY sequence
"""
CARRIED = """
WITH RECURSIVE back AS (
    (SELECT c.sequence, c.submission_id, c.step, c.meta, c.data, c.carry,
            s.state = 'settled' AND s.outcome = 'completed' AND s.agent_id = $3 AS kept
       FROM threadwarden.checkpoints c JOIN threadwarden.submissions s USING (submission_id)
      WHERE c.thread_id = $1 AND c.carry AND c.submission_id <> $2
      ORDER BY c.sequence DESC LIMIT 1)
    UNION ALL
    SELECT older.*
      FROM back CROSS JOIN LATERAL (
           SELECT c.sequence, c.submission_id, c.step, c.meta, c.data, c.carry,
                  s.state = 'settled' AND s.outcome = 'completed' AND s.agent_id = $3
             FROM threadwarden.checkpoints c JOIN threadwarden.submissions s USING (submission_id)
            WHERE c.thread_id = $1 AND c.carry AND c.submission_id <> $2
              AND c.sequence < back.sequence
            ORDER BY c.sequence DESC LIMIT 1) older
     WHERE back.meta @> '{"delta": true}' OR NOT back.kept
)
SELECT submission_id, step, meta, data, carry FROM back WHERE kept ORDER BY sequence
"""
"""The thread's carried chain: its newest carried row that is whole (not marked ``"delta":
true`` in its meta) and the carried rows after it, each of the thread's completed submissions
for the same agent. A failed or aborted turn's state does not carry (as its messages are no
part of an agent's memory), nor another agent's on the same thread. The walk goes back one
row at a time on ``checkpoints_carried`` (newest first) and stops at that whole row: a read
bounded by the chain (and the rows of other turns among it), not by the thread, whatever the
planner estimates."""


class Checkpoints:
    """Fenced saves and the reads a resuming binding needs."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def save(
        self,
        claim: Claim,
        *,
        step: int,
        meta: Any,
        data: bytes,
        carry: bool,
        records: Sequence[tuple[str, Any]] = (),
    ) -> list[ThreadRecord]:
        """Save one checkpoint (and append ``records``, not journal steps) under the attempt's
        fence, in one transaction. Raises `StaleAttempt` or `AbortRequested`, writing nothing."""
        async with self._pool.acquire() as conn, conn.transaction():
            await fence(conn, claim, states=("running",), honour_abort=True)
            await conn.execute(
                _INSERT,
                claim.thread_id,
                claim.submission_id,
                claim.epoch,
                step,
                carry,
                meta,
                data,
            )
            return [await append_in(conn, claim, kind, body) for kind, body in records]

    async def load(self, claim: Claim) -> list[CheckpointRow]:
        """The carried chain of the thread's earlier completed submissions for the same agent
        (`CARRIED`: the newest whole carried checkpoint and the carried ones after it, if any),
        then every checkpoint this submission saved, in order."""
        async with self._pool.acquire() as conn:
            carried = await conn.fetch(
                CARRIED, claim.thread_id, claim.submission_id, claim.agent_id
            )
            own = await conn.fetch(OF_SUBMISSION, claim.submission_id)
        return [CheckpointRow(**dict(row)) for row in [*carried, *own]]
