"""The hot queries of a pass can use their indexes (pgqueuer's EXPLAIN tests).

With sequential scans disabled the planner still picks one when no index fits the query, so
finding the index in the plan proves the query and the index match, whatever the table sizes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from tests.helpers.ledger import explain
from threadwarden.ledger.checkpoints import CARRIED, OF_SUBMISSION
from threadwarden.ledger.maintenance import BEGIN, LOCK_WITH_HEADS
from threadwarden.ledger.messages import CLAIM
from threadwarden.ledger.pass_finish import LOCK_HOST_WITH_DEADLINES
from threadwarden.ledger.projection import REFRESH
from threadwarden.ledger.sweep import OVERDUE


@pytest.mark.parametrize(
    ("name", "query", "args", "indexes"),
    [
        (
            "host row and deadlines",
            LOCK_HOST_WITH_DEADLINES,
            ("h",),
            ["publications_due", "messages_due"],
        ),
        ("lane heads", LOCK_WITH_HEADS, ("h",), ["submissions_lane"]),
        (
            "begin: host row, deadlines and heads in one statement",
            BEGIN,
            ("h", datetime(2026, 1, 1, tzinfo=UTC)),
            ["publications_due", "messages_due", "submissions_lane"],
        ),
        ("sweeper scan", OVERDUE, (2_000, 500), ["hosts_alarm_at"]),
        ("message claim", CLAIM, ("h", 30_000, "token"), ["messages_due"]),
        ("a submission's checkpoints", OF_SUBMISSION, ("sub_1",), ["checkpoints_of_submission"]),
        ("a thread's carried checkpoint", CARRIED, ("t", "sub_1", "a"), ["checkpoints_carried"]),
        # Only the thread's nonterminal rows are counted (the settled ones are derived from its
        # sequence): a refresh costs the same on a thread of ten submissions or a million.
        ("projection refresh", REFRESH, (["t"],), ["submissions_lane"]),
    ],
)
async def test_hot_query_uses_its_index(
    pool: asyncpg.Pool[Any], name: str, query: str, args: tuple[object, ...], indexes: list[str]
) -> None:
    explained = await explain(pool, query, *args)
    for index in indexes:
        assert index in explained, f"{name}: {index} not used\n{explained}"
    assert "Seq Scan" not in explained, f"{name}: a sequential scan\n{explained}"
    # The other index over a thread's submissions would mean scanning all of its rows.
    assert "idempotency_key" not in explained, f"{name}: every submission scanned\n{explained}"
