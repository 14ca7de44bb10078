"""``threadwarden inbox``: everything waiting for a person, across threads, oldest first
(issue 12, CLI), and the query plan that keeps it cheap on a large ledger."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import CHARGE, run_cli, unknown_side_effect
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.inbox import WAITING
from threadwarden.ledger.status import SETTLEMENT_OF
from threadwarden.worker.runtime import running_worker

ENTRY_FIELDS = {
    "submission_id",
    "thread_id",
    "host_id",
    "agent_id",
    "waiting_for",
    "what",
    "request",
    "created_at",
    "waiting_since",
    "age_s",
}
"""What `inbox --json` prints per entry (docs/operations.md)."""


async def inbox(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert await run_cli("inbox", "--json", *flags) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.usefixtures("cli_env")
async def test_inbox_lists_pending_approvals_and_unknown_side_effects_oldest_first(
    settings: Settings,
    connections: Connections,
    failpoints: Failpoints,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    assert await inbox(capsys) == {"entries": [], "more": False}
    # Planted before the worker starts, so no pass races the attempt that leaves it unknown.
    unknown = await unknown_side_effect(pool, f"{ids}-charge")
    async with running_worker(settings, connections, failpoints=failpoints):
        approvals = [
            await client.submit(
                f"{ids}-ask{n}", agent_id="scripted", input=[{"approval": f"spend {n}?"}]
            )
            for n in (1, 2)
        ]
        done = await client.submit(f"{ids}-done", agent_id="scripted", input=[{"say": "hi"}])
        await client.result(done.submission_id, timeout=30)
        listed = await eventually(
            lambda: inbox(capsys),
            lambda page: len(page["entries"]) == 3,
            what="both approvals and the unknown side effect in the inbox",
        )
        assert listed["more"] is False
        entries = listed["entries"]
        assert all(set(e) == ENTRY_FIELDS for e in entries)
        assert [e["submission_id"] for e in entries] == [
            unknown,
            *(r.submission_id for r in approvals),
        ]
        charge, ask1, ask2 = entries
        assert (charge["thread_id"], charge["host_id"], charge["agent_id"]) == (
            f"{ids}-charge",
            f"{ids}-charge",
            "echo",
        )
        assert (charge["waiting_for"], charge["what"], charge["request"]) == (
            "unknown-resolution",
            "tool charge",
            CHARGE,
        )
        assert (ask1["thread_id"], ask1["agent_id"], ask1["waiting_for"]) == (
            f"{ids}-ask1",
            "scripted",
            "approval",
        )
        assert (ask1["what"], ask1["request"]) == ("spend 1?", {"reason": "spend 1?"})
        for entry in entries:
            created, since = (
                datetime.fromisoformat(entry[k]) for k in ("created_at", "waiting_since")
            )
            assert created <= since and entry["age_s"] >= 0
        assert ask1["created_at"] <= ask2["created_at"]

        page = await inbox(capsys, "--limit", "2")
        assert [e["submission_id"] for e in page["entries"]] == [unknown, ask1["submission_id"]]
        assert page["more"] is True

        assert await run_cli("inbox", "--limit", "2") == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == [
            "age",
            "waiting",
            "for",
            "submission",
            "thread",
            "agent",
            "what",
        ]
        assert (
            unknown in lines[2] and "unknown-resolution" in lines[2] and "tool charge" in lines[2]
        )
        assert ask1["submission_id"] in lines[3] and lines[3].endswith("spend 1?")
        assert lines[4] == "(more wait: showing the oldest 2; raise --limit)"

        # Decided, they leave the inbox.
        assert await run_cli("resolve", unknown, "--outcome", "fail") == 0
        for receipt in approvals:
            assert await run_cli("deny", receipt.submission_id) == 0
        capsys.readouterr()
        assert await inbox(capsys) == {"entries": [], "more": False}
        assert await run_cli("inbox") == 0
        assert capsys.readouterr().out.strip() == "nothing waits for a person"


SETTLED_ROWS = 100_000
WAITING_ROWS = 300


async def seed(pool: asyncpg.Pool[Any]) -> None:
    """A large ledger: ``SETTLED_ROWS`` settled submissions on 2,000 threads with a record each,
    and ``WAITING_ROWS`` waiting ones (half suspended, half unknown) with their request."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO threadwarden.hosts (host_id)"
            " SELECT 'h' || n FROM generate_series(1, 2000) n"
        )
        await conn.execute(
            "INSERT INTO threadwarden.threads (thread_id, host_id)"
            " SELECT 'h' || n, 'h' || n FROM generate_series(1, 2000) n"
        )
        await conn.execute(
            "INSERT INTO threadwarden.submissions (submission_id, thread_id, sequence,"
            "   idempotency_key, payload_digest, agent_id, input, state, outcome, created_at)"
            " SELECT 'sub_' || n, 'h' || (n % 2000 + 1), n, 'k' || n, 'd', 'scripted', '[]',"
            "        CASE WHEN n > $2 THEN 'settled'"
            "             WHEN n % 2 = 0 THEN 'suspended' ELSE 'unknown' END,"
            "        CASE WHEN n <= $2 THEN NULL ELSE 'completed' END,"
            "        clock_timestamp() - make_interval(secs => n)"
            "   FROM generate_series(1, $1) n",
            SETTLED_ROWS + WAITING_ROWS,
            WAITING_ROWS,
        )
        await conn.execute(
            "INSERT INTO threadwarden.records (thread_id, sequence, record_id, submission_id,"
            "   kind, body, epoch, step)"
            " SELECT s.thread_id, s.sequence, s.thread_id || ':' || s.sequence, s.submission_id,"
            "        CASE s.state WHEN 'suspended' THEN 'approval-requested'"
            "                     WHEN 'unknown' THEN 'tool-call' ELSE 'settlement' END,"
            "        '{}'::jsonb, 1, CASE WHEN s.state = 'settled' THEN NULL ELSE 1 END"
            "   FROM threadwarden.submissions s"
        )
        await conn.execute("ANALYZE threadwarden.submissions")
        await conn.execute("ANALYZE threadwarden.records")
        await conn.execute("ANALYZE threadwarden.threads")


@pytest.mark.timeout(300)
async def test_inbox_query_reads_the_waiting_index_not_the_table_at_scale(
    pool: asyncpg.Pool[Any],
) -> None:
    await seed(pool)
    async with pool.acquire() as conn:
        rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {WAITING}", 101)
        plan = "\n".join(r[0] for r in rows)
        started = time.monotonic()
        listed = await conn.fetch(WAITING, 101)
        took_ms = (time.monotonic() - started) * 1000
    assert "submissions_waiting" in plan, plan
    assert "records_by_submission" in plan, plan
    assert "Seq Scan on submissions" not in plan and "Seq Scan on records" not in plan, plan
    # Oldest first: in the seed, the higher the number the older the submission.
    assert [r["submission_id"] for r in listed][:3] == ["sub_300", "sub_299", "sub_298"]
    assert len(listed) == 101
    print(f"\ninbox over {SETTLED_ROWS + WAITING_ROWS} submissions: {took_ms:.1f} ms\n{plan}")

    # The settlement read behind `result()` waits (and their rechecks) on the same ledger.
    rows = await pool.fetch(f"EXPLAIN {SETTLEMENT_OF}", "sub_5000")
    plan = "\n".join(r[0] for r in rows)
    assert "records_one_settlement" in plan and "Seq Scan" not in plan, plan
