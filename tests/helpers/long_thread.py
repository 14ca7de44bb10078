"""A long thread written in bulk (one INSERT … SELECT generate_series per table), and the rows a
statement reads, counted from its plan: for tests whose cost must not follow a thread's length.

Admitting and settling 5,000 submissions one by one would take minutes; these rows are what
they would leave (each submission one ``note`` and its settlement), written in well under a
second. `seed_turns` lengthens an agent's thread the same way: completed turns after a real one,
each a copy of its conversation record with the marker changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import asyncpg

from threadwarden.bindings import SUMMARY

TURNS = 5_000
"""Settled submissions of the long thread; each wrote two records (``note``, ``settlement``)."""
RECORDS = 2 * TURNS

_HOST = "INSERT INTO threadwarden.hosts (host_id) VALUES ($1)"
_THREAD = """
INSERT INTO threadwarden.threads (thread_id, host_id, next_sequence, next_record)
VALUES ($1, $1, $2::bigint + 1, 2 * $2::bigint + 1)
"""
_SUBMISSIONS = """
INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence, idempotency_key,
                                      payload_digest, agent_id, agent_digest, input, state,
                                      outcome, attempts, epoch, settled_at)
SELECT $1 || ':s' || n, $1, n, 'key-' || n, 'digest', 'echo', 'digest-1', '{}'::jsonb,
       'settled', 'completed', 1, n, clock_timestamp()
  FROM generate_series(1, $2::bigint) AS n
"""
_RECORDS = """
INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id, kind, body,
                                  epoch, step)
SELECT $1, n, $1 || ':' || n, $1 || ':s' || (n + 1) / 2,
       CASE WHEN cut.last IS NOT NULL THEN $5 WHEN n % 2 = 1 THEN 'note' ELSE 'settlement' END,
       CASE WHEN cut.last IS NOT NULL
            THEN jsonb_build_object('of', 'note', 'first', 1, 'last', cut.last,
                                    'turns', cut.last / 2, 'text', 'what came before')
            WHEN n % 2 = 1 THEN jsonb_build_object('turn', (n + 1) / 2)
            ELSE '{"outcome": "completed", "result": null, "reason": null}'::jsonb END,
       (n + 1) / 2, CASE WHEN n % 2 = 1 THEN 1 END
  FROM generate_series(1, 2 * $2::bigint) AS n
  LEFT JOIN unnest($3::bigint[], $4::bigint[]) AS cut (sequence, last) ON cut.sequence = n
"""


async def write_long_thread(
    pool: asyncpg.Pool[Any], thread_id: str, *, summaries: dict[int, int] | None = None
) -> None:
    """Write thread ``thread_id`` (its own host) with `TURNS` settled ``echo`` submissions and
    their `RECORDS` records, then analyze. ``summaries``: record sequence → the ``last``
    sequence of the `SUMMARY` record written there instead of that turn's ``note``."""
    cuts = summaries or {}
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(_HOST, thread_id)
        await conn.execute(_THREAD, thread_id, TURNS)
        await conn.execute(_SUBMISSIONS, thread_id, TURNS)
        await conn.execute(_RECORDS, thread_id, TURNS, list(cuts), list(cuts.values()), SUMMARY)
    await pool.execute("ANALYZE threadwarden.records, threadwarden.submissions")


async def rows_read(
    pool: asyncpg.Pool[Any], relation: str, query: str, *args: object
) -> tuple[int, list[dict[str, Any]]]:
    """Run ``query`` under EXPLAIN (ANALYZE, FORMAT JSON) in a transaction rolled back after,
    and count the rows its scans of ``relation`` read: those they returned and those their
    filters removed, over every loop. Also the plan's nodes that scan it, for messages."""
    async with pool.acquire() as conn:
        transaction = conn.transaction()
        await transaction.start()
        try:
            explained = await conn.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", *args
            )
        finally:
            await transaction.rollback()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    scans = [node for node in _nodes(plan) if node.get("Relation Name") == relation]
    total = 0
    for node in scans:
        loops = int(node.get("Actual Loops", 0))
        per_loop = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        total += round(per_loop * loops)
    return total, scans


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


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
