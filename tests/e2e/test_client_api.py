"""The public client: awaiting outcomes, following records live, composing with an existing
Temporal client and pool (docs/client.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.helpers.checks import say, settled
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import FeedRecord
from threadwarden.client.reads import SubmissionResult
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.errors import InvalidInput, NotFound, ResultTimeout
from threadwarden.reading import feed, listening

NEVER_S = 3_600.0
"""A re-check interval no test outlives: only a notification can end a wait."""
DEADLINE_S = 60.0


@pytest.fixture
def notified_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits end on a ledger notification only (the coarse re-check never comes)."""
    monkeypatch.setattr(feed, "RECHECK_S", NEVER_S)


async def test_client_result_waits_for_completed_and_failed_outcomes(
    worker: None, client: ThreadwardenClient, notified_only: None, ids: str
) -> None:
    done = await client.submit(ids, agent_id="scripted", input=[{"tool": "t", "args": {"n": 1}}])
    failing = await client.submit(ids, agent_id="scripted", input=[{"fail": "no luck"}])

    async with asyncio.timeout(DEADLINE_S):  # no own timeout: only a notification ends a wait
        completed, failed = await asyncio.gather(
            client.result(done.submission_id), client.result(failing.submission_id)
        )

    assert completed == SubmissionResult(
        submission_id=done.submission_id,
        thread_id=ids,
        outcome="completed",
        result=completed.result,
        reason=None,
    )
    assert completed.result is not None
    assert failed.outcome == "failed" and failed.thread_id == ids
    assert failed.reason is not None and "no luck" in failed.reason
    # The same answer once settled, without waiting.
    assert await client.result(done.submission_id, timeout=0) == completed


async def test_client_result_of_unknown_submission_raises_not_found(
    client: ThreadwardenClient, database_url: str
) -> None:
    with pytest.raises(NotFound, match="no-such-submission"):
        await client.result("no-such-submission", timeout=DEADLINE_S)


async def test_client_result_timeout_raises_result_timeout_and_submission_goes_on(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="scripted", input=[{"approval": "may I?"}])
    await eventually(
        lambda: client.thread_status(ids),
        lambda status: status.submissions[0].waiting_for == "approval",
        what="the approval wait",
    )

    with pytest.raises(ResultTimeout) as raised:
        await client.result(receipt.submission_id, timeout=0.2)
    assert isinstance(raised.value, TimeoutError)

    await client.deny(receipt.submission_id, "not now")
    denied = await client.result(receipt.submission_id, timeout=DEADLINE_S)
    assert (denied.outcome, denied.reason) == ("failed", "approval denied: not now")


async def test_client_result_falls_back_to_rechecking_when_notifications_are_missed(
    worker: None, client: ThreadwardenClient, monkeypatch: pytest.MonkeyPatch, ids: str
) -> None:
    monkeypatch.setattr(listening, "COMMITTED_CHANNEL", f"silent_{ids}")  # hears nothing
    monkeypatch.setattr(feed, "RECHECK_S", 0.1)
    receipt = await client.submit(ids, agent_id="scripted", input=say("quiet"))

    outcome = await client.result(receipt.submission_id, timeout=DEADLINE_S)

    assert outcome.outcome == "completed"


async def test_client_records_yields_committed_records_then_new_ones_live(
    worker: None, client: ThreadwardenClient, notified_only: None, ids: str
) -> None:
    first = await client.submit(ids, agent_id="scripted", input=say("one"))
    await client.result(first.submission_id, timeout=DEADLINE_S)
    committed = await client.records(ids)
    assert [r["kind"] for r in committed] == ["message", "settlement"]

    seen: list[FeedRecord] = []
    second = None
    async with asyncio.timeout(DEADLINE_S):
        async for record in client.records(ids):
            seen.append(record)
            if len(seen) == len(committed):  # caught up: what follows can only come live
                second = await client.submit(ids, agent_id="scripted", input=say("two"))
            if second is not None and (record.submission_id, record.kind) == (
                second.submission_id,
                "settlement",
            ):
                break

    assert second is not None
    assert [r.model_dump() for r in seen[: len(committed)]] == committed
    assert [r.sequence for r in seen] == [1, 2, 3, 4]
    assert [(r.submission_id, r.kind) for r in seen[2:]] == [
        (second.submission_id, "message"),
        (second.submission_id, "settlement"),
    ]
    assert seen[2].body["text"] == "two"


async def test_client_records_of_unknown_thread_raises_not_found(
    client: ThreadwardenClient, database_url: str
) -> None:
    with pytest.raises(NotFound):
        async for _ in client.records("no-such-thread"):
            pass


async def test_client_from_existing_temporal_client_and_pool_leaves_the_pool_open(
    worker: None,
    settings: Settings,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    database_url: str,
    ids: str,
) -> None:
    temporal = await Client.connect(  # a user's own client
        connections.temporal_address, data_converter=pydantic_data_converter
    )

    async with ThreadwardenClient.from_client(temporal, database=pool, settings=settings) as tw:
        receipt = await tw.submit(ids, agent_id="scripted", input=say("composed"))
        outcome = await tw.result(receipt.submission_id, timeout=DEADLINE_S)
    assert outcome.outcome == "completed"
    assert not pool.is_closing()
    assert await pool.fetchval("SELECT count(*) FROM threadwarden.records") == 2

    async with ThreadwardenClient.from_client(
        temporal, database=database_url, settings=settings
    ) as owned:
        again = await owned.result(receipt.submission_id, timeout=0)
        await settled(owned, ids, 1)
    assert again == outcome


async def test_client_from_client_refuses_a_pool_without_json_codecs(
    settings: Settings, connections: Connections, database_url: str
) -> None:
    temporal = await Client.connect(connections.temporal_address)
    plain = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        with pytest.raises(InvalidInput, match="database"):
            async with ThreadwardenClient.from_client(temporal, database=plain, settings=settings):
                pass
    finally:
        await plain.close()
