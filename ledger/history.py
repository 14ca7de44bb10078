"""What a claim hands its binding as the thread's history, read by the route its
``history_kinds`` decide (docs/bindings.md, "What a claim loads"): nothing, the newest summary
and the records after what it covers, or the newest `HISTORY_LIMIT` records.

`history_read` decides the route once; `HISTORY` is the claim statement's branch for each
(`threadwarden.ledger.claims.CLAIM_HEAD`), each a range of ``records_by_kind`` or of the
primary key, so that what a turn reads follows what it is handed, not the thread's length.
"""

from __future__ import annotations

from typing import Any, assert_never

from pydantic import BaseModel

from threadwarden.bindings import SUMMARY

HISTORY_LIMIT = 1_000
"""Most recent records handed as thread history to a binding that reads no summaries."""


class NoHistory(BaseModel):
    """The binding reads no history: the claim reads no record of the thread."""


class NewestRecords(BaseModel):
    """The newest `HISTORY_LIMIT` records of ``kinds`` (None: of every kind)."""

    kinds: frozenset[str] | None = None


class SinceSummary(BaseModel):
    """The thread's newest summary, then every record of ``kinds`` after what it covers."""

    kinds: frozenset[str]
    """The binding's other kinds (`threadwarden.bindings.SUMMARY` left out)."""


HistoryRead = NoHistory | NewestRecords | SinceSummary


def history_read(kinds: frozenset[str] | None) -> HistoryRead:
    """How a claim reads the history of a binding whose ``history_kinds`` are ``kinds``
    (`threadwarden.bindings.Binding` says what each route returns)."""
    if kinds is None:
        return NewestRecords()
    if not kinds:
        return NoHistory()
    if SUMMARY in kinds:
        return SinceSummary(kinds=kinds - {SUMMARY})
    return NewestRecords(kinds=kinds)


def history_routes(history_kinds: dict[str, frozenset[str]]) -> dict[str, dict[str, Any]]:
    """Agent id → the route its history is read by (`history_read`), as `CLAIM_HEAD`
    dispatches on it (``$10``)."""
    return {agent: _route(history_read(kinds)) for agent, kinds in history_kinds.items()}


def _route(read: HistoryRead) -> dict[str, Any]:
    match read:
        case NoHistory():
            return {"route": "none", "kinds": []}
        case NewestRecords(kinds=None):
            return {"route": "newest", "kinds": []}
        case NewestRecords(kinds=kinds):
            return {"route": "newest-of-kinds", "kinds": sorted(kinds or ())}
        case SinceSummary(kinds=kinds):
            return {"route": "since-summary", "kinds": sorted(kinds)}
    assert_never(read)


HISTORY = """
  WHEN 'newest' THEN (SELECT json_agg(n ORDER BY n.sequence) FROM (
    SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
      FROM threadwarden.records r
     WHERE r.thread_id = $2 AND r.submission_id <> (SELECT submission_id FROM reads)
     ORDER BY r.sequence DESC LIMIT $9) n)
  WHEN 'newest-of-kinds' THEN (SELECT json_agg(n ORDER BY n.sequence) FROM (
    SELECT k.* FROM unnest((SELECT kinds FROM reads)) AS wanted (kind), LATERAL (
        SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
          FROM threadwarden.records r
         WHERE r.thread_id = $2 AND r.kind = wanted.kind
           AND r.submission_id <> (SELECT submission_id FROM reads)
         ORDER BY r.sequence DESC LIMIT $9) k
     ORDER BY k.sequence DESC LIMIT $9) n)
  WHEN 'since-summary' THEN (SELECT json_agg(n ORDER BY n.kind = $12 DESC, n.sequence) FROM (
    WITH cut AS (
      SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step,
             CASE WHEN jsonb_typeof(r.body -> 'last') = 'number'
                  THEN LEAST(GREATEST((r.body ->> 'last')::numeric, 0), 9e18)::bigint
                  ELSE 0 END AS covered
        FROM threadwarden.records r
       WHERE r.thread_id = $2 AND r.kind = $12
         AND r.submission_id <> (SELECT submission_id FROM reads)
       ORDER BY r.sequence DESC LIMIT 1
    )
    SELECT sequence, record_id, submission_id, kind, body, step FROM cut
    UNION ALL
    SELECT k.* FROM unnest((SELECT kinds FROM reads)) AS wanted (kind), LATERAL (
        SELECT r.sequence, r.record_id, r.submission_id, r.kind, r.body, r.step
          FROM threadwarden.records r
         WHERE r.thread_id = $2 AND r.kind = wanted.kind
           AND r.sequence > COALESCE((SELECT covered FROM cut), 0)
           AND r.submission_id <> (SELECT submission_id FROM reads)
        OFFSET 0) k) n)
"""
"""The ``WHEN`` branches of the claim's ``CASE`` on the route, over its ``reads`` CTE (the
taken head's submission id, its route and kinds; ``$2`` the thread, ``$9`` `HISTORY_LIMIT`,
``$12`` `SUMMARY`).

The claimed head's history, by the route its binding reads (`history_read`); the route
``none`` has no branch, and a ``CASE`` runs only the subquery of the branch it takes, so it
reads nothing. Each branch walks ``records_by_kind`` or the primary key from where its answer
starts and stops where it ends: its cost follows what it returns, not the thread's length
(``newest-of-kinds`` reads at most ``$9`` rows per kind). ``OFFSET 0`` keeps a kind's range
its own subquery: joined to the kinds instead, it was planned as one range of the primary key
past the summary, every kind's rows read and most dropped.

``since-summary`` puts the summary first, where what it stands for would be, then the rest in
sequence order (the turns it left verbatim may precede it in the thread). A summary whose
``last`` is not a number (a record some binding wrote before summaries had a meaning) covers
nothing."""
