"""The chaos run's own reads of the ledger: plain SQL on a connection of its own.

Nothing here goes through threadwarden's repositories: the check must see the rows as they are.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from chaos.checks import RecordRow, SubmissionRow

PROGRESS_SQL = (
    "SELECT count(*) FILTER (WHERE state = 'settled') AS settled, count(*) AS admitted"
    " FROM threadwarden.submissions"
)
UNQUIET_HOSTS_SQL = (
    "SELECT count(*) FROM threadwarden.hosts"
    " WHERE processed < dirty OR alarm_at IS NOT NULL OR nonterminal > 0"
)
SUBMISSIONS_SQL = (
    "SELECT submission_id, thread_id, sequence, input, state, outcome, epoch"
    " FROM threadwarden.submissions"
)
RECORDS_SQL = (
    "SELECT thread_id, sequence, submission_id, kind, body, epoch FROM threadwarden.records"
)


async def progress(conn: asyncpg.Connection[Any]) -> tuple[int, int]:
    """(settled, admitted) submissions."""
    row = await conn.fetchrow(PROGRESS_SQL)
    assert row is not None
    return int(row["settled"]), int(row["admitted"])


async def unquiet_hosts(conn: asyncpg.Connection[Any]) -> int:
    """Hosts with unacknowledged work, an armed alarm or a nonterminal submission."""
    return int(await conn.fetchval(UNQUIET_HOSTS_SQL))


async def read_ledger(
    conn: asyncpg.Connection[Any],
) -> tuple[list[SubmissionRow], list[RecordRow]]:
    """Every submission and every canonical record."""
    submissions = [
        SubmissionRow(
            submission_id=r["submission_id"],
            thread_id=r["thread_id"],
            sequence=r["sequence"],
            input=json.loads(r["input"]),
            state=r["state"],
            outcome=r["outcome"],
            epoch=r["epoch"],
        )
        for r in await conn.fetch(SUBMISSIONS_SQL)
    ]
    records = [
        RecordRow(
            thread_id=r["thread_id"],
            sequence=r["sequence"],
            submission_id=r["submission_id"],
            kind=r["kind"],
            body=json.loads(r["body"]),
            epoch=r["epoch"],
        )
        for r in await conn.fetch(RECORDS_SQL)
    ]
    return submissions, records
