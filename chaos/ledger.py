"""The chaos run's own reads of the ledger: plain SQL on a connection of its own.

Nothing here goes through threadwarden's repositories: the check must see the rows as they are.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from chaos.rows import MarkerRow, RecordRow, SubmissionRow

PROGRESS_SQL = (
    "SELECT count(*) FILTER (WHERE state = 'settled') AS settled, count(*) AS admitted"
    " FROM threadwarden.submissions"
    " WHERE parent_submission_id IS NULL AND source_message_id IS NULL"
)
"""The run's own submissions (children, admitted by their parents' calls, and messages,
admitted by deliveries, are not among them)."""
UNQUIET_HOSTS_SQL = (
    "SELECT count(*) FROM threadwarden.hosts"
    " WHERE processed < dirty OR alarm_at IS NOT NULL OR nonterminal > 0"
)
SUBMISSIONS_SQL = (
    "SELECT submission_id, thread_id, sequence, input, state, outcome, epoch,"
    " parent_submission_id, parent_call_step, source_message_id FROM threadwarden.submissions"
)
RECORDS_SQL = (
    "SELECT thread_id, sequence, submission_id, kind, body, epoch, step, record_id, created_at"
    " FROM threadwarden.records"
)
MARKERS_SQL = (
    "SELECT parent_submission_id, child_submission_id, outcome FROM threadwarden.child_settlements"
)


async def progress(conn: asyncpg.Connection[Any]) -> tuple[int, int]:
    """(settled, admitted) submissions of the run (not their children)."""
    row = await conn.fetchrow(PROGRESS_SQL)
    assert row is not None
    return int(row["settled"]), int(row["admitted"])


async def unquiet_hosts(conn: asyncpg.Connection[Any]) -> int:
    """Hosts with unacknowledged work, an armed alarm or a nonterminal submission."""
    return int(await conn.fetchval(UNQUIET_HOSTS_SQL))


async def read_ledger(
    conn: asyncpg.Connection[Any],
) -> tuple[list[SubmissionRow], list[RecordRow], list[MarkerRow]]:
    """Every submission, every canonical record and every child-settled marker (each row's
    columns are its fields)."""
    submissions = [
        SubmissionRow(**{**row, "input": json.loads(row["input"])})
        for row in await conn.fetch(SUBMISSIONS_SQL)
    ]
    records = [
        RecordRow(**{**row, "body": json.loads(row["body"])})
        for row in await conn.fetch(RECORDS_SQL)
    ]
    markers = [MarkerRow(**row) for row in await conn.fetch(MARKERS_SQL)]
    return submissions, records, markers
