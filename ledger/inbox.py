"""The operator inbox: every submission waiting for a person, across threads, oldest first.

A pending approval or question (``suspended``) or an unknown side effect (``unknown``): only an
operator's decision (or answer) moves it on. The listing reads the ``submissions_waiting``
partial index (migration 8) in order and stops after its limit; each row's request (the
``approval-requested``, ``input-requested`` or unresolved ``tool-call`` record) comes from
``records_by_submission``.

A parent suspended for its subagent children is ``suspended`` too, but waits for no person: its
latest wait record is ``children-awaited`` (not ``approval-requested``), and the listing leaves
it out (``threadwarden status`` shows it, ``waiting_for`` ``child``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel

from threadwarden.validation import canonical_json

WAITING = (
    "SELECT s.submission_id, s.thread_id, t.host_id, s.agent_id, s.state, s.created_at,"
    "       w.kind AS request_kind, w.body AS request,"
    "       COALESCE(w.created_at, s.created_at) AS waiting_since,"
    "       clock_timestamp() AS read_at"
    "  FROM threadwarden.submissions s"
    "  JOIN threadwarden.threads t USING (thread_id)"
    "  LEFT JOIN LATERAL ("
    "    SELECT r.kind, r.body, r.created_at FROM threadwarden.records r"
    # records.submission_id has the default collation, submissions' "C": without the explicit
    # collation the comparison matches neither and records_by_submission goes unused.
    '     WHERE r.submission_id = s.submission_id COLLATE "default"'
    # A suspended row's latest wait record says whether it waits for a person (an approval)
    # or for its children (left out below).
    "       AND r.kind = ANY (CASE s.state"
    "                         WHEN 'suspended'"
    "                         THEN '{approval-requested,input-requested,children-awaited}'::text[]"
    "                         ELSE '{tool-call}'::text[] END)"
    "     ORDER BY r.sequence DESC LIMIT 1"
    "  ) w ON true"
    " WHERE s.state IN ('suspended', 'unknown')"
    "   AND w.kind IS DISTINCT FROM 'children-awaited'"
    " ORDER BY s.created_at, s.submission_id"
    " LIMIT $1"
)
"""Up to ``$1`` submissions waiting for a person, oldest first, each with its latest request
record (a parent waiting for its children is not one)."""


class InboxEntry(BaseModel):
    """One submission waiting for a person."""

    submission_id: str
    thread_id: str
    host_id: str
    agent_id: str
    waiting_for: Literal["approval", "input", "unknown-resolution"]
    """``approval`` (decide with approve/deny), ``input`` (a question: answer it) or
    ``unknown-resolution`` (decide with resolve)."""
    what: str
    """One line: the approval's reason, the question (its payload, as JSON), or ``tool NAME``
    for the side effect in doubt."""
    request: Any
    """The request record's body: ``{"reason"}``, ``{"payload"[, "schema"]}``, or
    ``{"tool", "args", "side_effect", ...}``."""
    created_at: datetime
    """When the submission was admitted (the listing's order)."""
    waiting_since: datetime
    """When its request was recorded."""
    age_s: float
    """Seconds since ``waiting_since``, at the read."""


class InboxPage(BaseModel):
    """The oldest waiting submissions; ``more`` when the limit left some out."""

    entries: list[InboxEntry]
    more: bool


class InboxReader:
    """Reads the inbox; no locks taken."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def waiting(self, limit: int) -> InboxPage:
        """The ``limit`` oldest submissions waiting for a person."""
        rows = await self._pool.fetch(WAITING, limit + 1)
        return InboxPage(entries=[_entry(r) for r in rows[:limit]], more=len(rows) > limit)


def _entry(row: asyncpg.Record) -> InboxEntry:
    request = row["request"]
    body = request if isinstance(request, dict) else {}
    waiting_for: Literal["approval", "input", "unknown-resolution"]
    if row["state"] == "suspended" and row["request_kind"] == "input-requested":
        waiting_for = "input"
        what = canonical_json(body.get("payload"))[:300]
    elif row["state"] == "suspended":
        waiting_for = "approval"
        what = str(body.get("reason") or "approval")
    else:
        waiting_for = "unknown-resolution"
        what = f"tool {body.get('tool', '?')}"
    return InboxEntry(
        submission_id=row["submission_id"],
        thread_id=row["thread_id"],
        host_id=row["host_id"],
        agent_id=row["agent_id"],
        waiting_for=waiting_for,
        what=what,
        request=request,
        created_at=row["created_at"],
        waiting_since=row["waiting_since"],
        age_s=round(max((row["read_at"] - row["waiting_since"]).total_seconds(), 0.0), 3),
    )
