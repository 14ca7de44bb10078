"""Long threads without running every turn: completed turns written straight into the ledger,
as a real turn wrote them (a copy of one real turn's conversation record, its marker changed)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

_SEED = """
WITH t AS (
  SELECT thread_id, next_sequence, next_record, producer_epoch FROM threadwarden.threads
   WHERE thread_id = $1 FOR UPDATE
), turns AS (
  SELECT n, t.thread_id, t.next_sequence + n AS sequence, t.next_record + 2 * n AS record,
         t.producer_epoch AS epoch, $1 || '-seeded-' || n AS submission_id
    FROM t, generate_series(0, $2 - 1) AS n
), subs AS (
  INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence, idempotency_key,
         payload_digest, agent_id, agent_digest, input, state, outcome, epoch, settled_at)
  SELECT submission_id, thread_id, sequence, submission_id, 'seeded', $3, $4,
         to_jsonb(replace($5, '#0 ', '#' || ($6 + n) || ' ')), 'settled', 'completed', epoch,
         clock_timestamp()
    FROM turns
  RETURNING submission_id
), recs AS (
  INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id, kind, body,
         epoch)
  SELECT thread_id, record + k, thread_id || ':' || (record + k), submission_id,
         CASE k WHEN 0 THEN $7 ELSE 'settlement' END,
         CASE k WHEN 0 THEN replace($8, '#0 ', '#' || ($6 + n) || ' ')::jsonb
                ELSE jsonb_build_object('outcome', 'completed') END,
         epoch
    FROM turns, generate_series(0, 1) AS k
   WHERE EXISTS (SELECT 1 FROM subs)
  RETURNING 1
)
UPDATE threadwarden.threads SET next_sequence = next_sequence + $2,
       next_record = next_record + 2 * $2
 WHERE thread_id = $1 AND (SELECT count(*) FROM recs) = 2 * $2
"""


async def seed_turns(
    pool: asyncpg.Pool[Any], thread_id: str, *, turns: int, first: int, kind: str
) -> None:
    """Write ``turns`` completed turns after the thread's first one (a real turn whose prompt
    began with ``#0 ``), numbered from ``first``: each a settled submission, a copy of the
    first turn's ``kind`` record and a settlement."""
    original = await pool.fetchrow(
        "SELECT s.agent_id, s.agent_digest, s.input, r.body"
        "  FROM threadwarden.records r JOIN threadwarden.submissions s USING (submission_id)"
        " WHERE r.thread_id = $1 AND r.kind = $2 ORDER BY r.sequence LIMIT 1",
        thread_id,
        kind,
    )
    assert original is not None, f"{thread_id} has no {kind} record to copy"
    prompt, body = original["input"], json.dumps(original["body"])  # the pool decodes jsonb
    await pool.execute(
        _SEED,
        thread_id,
        turns,
        original["agent_id"],
        original["agent_digest"],
        prompt,
        first,
        kind,
        body,
    )
