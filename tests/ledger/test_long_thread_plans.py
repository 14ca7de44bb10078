"""On a thread of 10,000 records and 5,000 settled submissions, a statement reads what it
returns, not the thread: a claim the records it hands over (docs/bindings.md, "What a claim
loads"), a repeated admission what it lists, a page of turns its page. Rows counted from the
plan (EXPLAIN ANALYZE), never timed.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.helpers.ledger import BINDINGS, Ledger
from tests.helpers.long_thread import RECORDS, rows_read, write_long_thread
from threadwarden.bindings import SUMMARY
from threadwarden.ledger.admission import KEY_READ
from threadwarden.ledger.claims import CLAIM_HEAD, CLAIMABLE
from threadwarden.ledger.history import HISTORY_LIMIT, history_routes
from threadwarden.ledger.status import TURNS, StatusReader

NEWEST_SUMMARY_AT, NEWEST_COVERS = RECORDS - 11, RECORDS - 20
"""The newest summary (in place of a ``note``) and the last sequence it covers: the history
of a summary reader is it and the 19 records after what it covers, but for itself."""
READS = {
    "nothing": frozenset[str](),
    "summary": frozenset({SUMMARY, "note", "settlement"}),
}


async def _claim_rows_read(ledger: Ledger, thread_id: str, kinds: frozenset[str]) -> int:
    """The rows of ``threadwarden.records`` a claim of the head reads for a binding whose
    ``history_kinds`` are ``kinds`` (the claim rolled back)."""
    begun = await ledger.begin(thread_id)
    read, scans = await rows_read(
        ledger.pool,
        "records",
        CLAIM_HEAD,
        thread_id,
        thread_id,
        begun.epoch,
        BINDINGS,
        "att_plan",
        "token",
        30_000,
        list(CLAIMABLE),
        HISTORY_LIMIT,
        history_routes({"echo": kinds}),
        None,
        SUMMARY,
        None,
    )
    assert scans, "the claim's plan scans no records at all: is it the claim?"
    return read


async def test_a_claim_on_a_long_thread_reads_only_the_history_it_returns(
    pool: asyncpg.Pool[Any], ledger: Ledger, ids: str
) -> None:
    await write_long_thread(pool, ids, summaries={5_001: 4_000, NEWEST_SUMMARY_AT: NEWEST_COVERS})
    await ledger.admit(ids)

    read = {name: await _claim_rows_read(ledger, ids, kinds) for name, kinds in READS.items()}
    begun = await ledger.begin(ids)
    claim = await ledger.attempts.claim_head(
        ids, begun.epoch, ids, bindings=BINDINGS, history_kinds={"echo": READS["summary"]}
    )

    assert claim is not None
    history = [r.sequence for r in claim.history]
    # (a) No history read: the claim reads no record (its new head has no journal either).
    assert read["nothing"] == 0, read
    # (b) The newest summary and the records after it: 20 rows, not the thread's 10,000 (nor
    # the 1,000 a fixed window read). A row or two of slack for a plan that reads one more
    # row to find where a range ends.
    assert read["summary"] <= len(history) + 2, (read, len(history))
    assert history == [
        NEWEST_SUMMARY_AT,
        *(n for n in range(NEWEST_COVERS + 1, RECORDS + 1) if n != NEWEST_SUMMARY_AT),
    ]


async def test_a_repeated_interrupt_admission_reads_only_what_it_interrupted(
    pool: asyncpg.Pool[Any], ledger: Ledger, ids: str
) -> None:
    await write_long_thread(pool, ids)
    await ledger.admissions.admit(
        thread_id=ids, agent_id="echo", input={}, host_id=ids, idempotency_key="again"
    )

    read, _ = await rows_read(pool, "submissions", KEY_READ, ids, "again", True)

    # The submission the key names and the one busy head: not the thread's 5,000 (the list of
    # interrupted submissions read every submission of the ledger).
    assert read <= 3, read


async def test_a_page_of_turns_on_a_long_thread_reads_its_page_in_one_statement(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    await write_long_thread(pool, ids)
    page = await StatusReader(pool).turns(ids, limit=20, before=2_501)
    assert [t.sequence for t in page.turns] == list(range(2_500, 2_480, -1))
    assert page.next_before == 2_481

    # `turns` is this one statement; its limit is the page and one more (is there an older?).
    submissions, scans = await rows_read(pool, "submissions", TURNS, ids, 2_501, 21)
    records, _ = await rows_read(pool, "records", TURNS, ids, 2_501, 21)
    # The page's 21 rows of the thread's 5,000 (no parent to look up), and each one's
    # settlement by its index: 21 records of the thread's 10,000.
    assert submissions <= 21 + 2, (submissions, scans)
    assert records <= 21 + 2, records
