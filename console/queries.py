"""The console's own reads of the ledger: pages of threads and of a thread's records.

Read-only, no locks. Each statement is bounded by its page size and walks an existing index
(``threads_pkey``, ``threads_host``, a ``(thread_id, …)`` unique index of submissions,
``records_pkey``), so its cost follows the page, not the ledger (tests/console/test_scale.py
EXPLAINs them at 10,000 threads and 100,000 records).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel

from threadwarden.client.feed import FeedRecord

PAGE_SIZE = 50
"""Threads per page of the threads list (and of a host's threads)."""
RECORDS_PAGE = 200
"""Records per page of a thread's timeline (the latest first loaded, older ones on request)."""

_THREAD_ROW = (
    "SELECT t.thread_id, t.host_id, t.created_at, c.states, c.waiting, r.last_at, r.last_kind"
    "  FROM threadwarden.threads t"
    "  LEFT JOIN LATERAL ("
    "    SELECT jsonb_object_agg(k, n) AS states, COALESCE(sum(w), 0) AS waiting"
    "      FROM (SELECT COALESCE(s.outcome, s.state) AS k, count(*) AS n,"
    # Waiting for a person: unknown, or suspended for an approval, not for its subagent
    # children (its latest wait record says which; read only for a suspended row).
    "                   count(*) FILTER (WHERE CASE s.state WHEN 'unknown' THEN true"
    "                     WHEN 'suspended' THEN ("
    "                       SELECT r.kind FROM threadwarden.records r"
    '                        WHERE r.submission_id = s.submission_id COLLATE "default"'
    "                          AND r.kind IN ('approval-requested', 'input-requested',"
    "                                         'children-awaited')"
    "                        ORDER BY r.sequence DESC LIMIT 1"
    "                     ) IS DISTINCT FROM 'children-awaited'"
    "                     ELSE false END) AS w"
    "              FROM threadwarden.submissions s WHERE s.thread_id = t.thread_id"
    "             GROUP BY 1) x"
    "  ) c ON true"
    "  LEFT JOIN LATERAL ("
    "    SELECT r.created_at AS last_at, r.kind AS last_kind FROM threadwarden.records r"
    "     WHERE r.thread_id = t.thread_id ORDER BY r.sequence DESC LIMIT 1"
    "  ) r ON true"
)

THREADS = (
    _THREAD_ROW + " WHERE t.thread_id LIKE $1 AND t.thread_id > $2 ORDER BY t.thread_id LIMIT $3"
)
"""A page of threads whose id starts with a prefix (``$1`` is ``prefix%``, escaped), after the
thread ``$2`` in byte order (``COLLATE "C"`` columns: the prefix is an index range)."""

HOST_THREADS = (
    _THREAD_ROW + " WHERE t.host_id = $1 AND t.thread_id > $2 ORDER BY t.thread_id LIMIT $3"
)
"""A page of a host's threads (``threads_host``)."""

RECORDS_BEFORE = (
    "SELECT sequence, record_id, submission_id, kind, body, epoch, created_at"
    "  FROM threadwarden.records WHERE thread_id = $1 AND sequence < $2"
    " ORDER BY sequence DESC LIMIT $3"
)
"""The ``$3`` latest records of a thread below sequence ``$2``, newest first."""


class ThreadRow(BaseModel):
    """One line of the threads list."""

    thread_id: str
    host_id: str
    created_at: datetime
    states: dict[str, int]
    """Submissions by state, settled ones by outcome (``completed``, ``failed``, ``aborted``)."""
    waiting: int
    """Submissions waiting for a person (pending approvals and unknown side effects; not a
    parent waiting for its subagent children)."""
    last_activity: datetime
    """When its latest record was written (its creation while it has none)."""
    last_kind: str | None


class ThreadPage(BaseModel):
    """A page of threads; ``next_after`` names the cursor of the next page (None: the last)."""

    threads: list[ThreadRow]
    next_after: str | None


class RecordView(FeedRecord):
    """One record of a thread's timeline: the record as the feed yields it, and when it was
    written."""

    created_at: datetime


class RecordPage(BaseModel):
    """The latest records below a sequence, oldest first; ``older`` when more lie before."""

    records: list[RecordView]
    older: bool


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching ids that start with ``prefix`` (its wildcards escaped)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


class ConsoleQueries:
    """The console's page reads."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    async def threads(self, *, prefix: str = "", after: str = "") -> ThreadPage:
        """The threads whose id starts with ``prefix``, after ``after``, one page."""
        rows = await self._pool.fetch(THREADS, like_prefix(prefix), after, PAGE_SIZE + 1)
        return _page(rows)

    async def host_threads(self, host_id: str, *, after: str = "") -> ThreadPage:
        """One page of a host's threads."""
        return _page(await self._pool.fetch(HOST_THREADS, host_id, after, PAGE_SIZE + 1))

    async def records(self, thread_id: str, *, before: int | None = None) -> RecordPage:
        """The latest `RECORDS_PAGE` records of the thread below ``before`` (all: None)."""
        below = 2**62 if before is None else before
        rows = await self._pool.fetch(RECORDS_BEFORE, thread_id, below, RECORDS_PAGE + 1)
        shown = [RecordView(**dict(r)) for r in rows[:RECORDS_PAGE]]
        shown.reverse()
        return RecordPage(records=shown, older=len(rows) > RECORDS_PAGE)


def _page(rows: list[asyncpg.Record]) -> ThreadPage:
    threads = [
        ThreadRow(
            thread_id=r["thread_id"],
            host_id=r["host_id"],
            created_at=r["created_at"],
            states={k: int(v) for k, v in (r["states"] or {}).items()},
            waiting=int(r["waiting"] or 0),
            last_activity=r["last_at"] or r["created_at"],
            last_kind=r["last_kind"],
        )
        for r in rows[:PAGE_SIZE]
    ]
    more = len(rows) > PAGE_SIZE
    return ThreadPage(threads=threads, next_after=threads[-1].thread_id if more else None)
