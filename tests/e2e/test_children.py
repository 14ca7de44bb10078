"""Subagent children end to end (children-brief §6, issue 13): a binding delegates with
``ctx.call_agent``, the parent waits without a claim and resumes, exactly once, on a real
Temporal server and Postgres.

Named ``test_children_scenario_NN_…`` where a test proves one of the brief's scenarios
(docs/protocol.md maps them all).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.helpers import child_agents
from tests.helpers.checks import assert_settled_once, converged
from tests.helpers.polling import eventually
from tests.helpers.processes import worker_process
from threadwarden.bindings import BindingRegistry
from threadwarden.ledger.children import child_thread_id_for
from threadwarden.ledger.models import ThreadStatus
from threadwarden.worker.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings


def registry(*bindings: Any) -> BindingRegistry:
    built = BindingRegistry()
    for binding in bindings:
        built.register(binding)
    return built


@pytest.fixture
async def family_worker(settings: Settings, connections: Connections) -> AsyncIterator[None]:
    """A worker with both the planner and the helper."""
    async with running_worker(settings, connections, registry(*child_agents.BOTH)):
        yield


def call(answer: Any, **extra: Any) -> dict[str, Any]:
    return {"agent": "helper", "input": {"answer": answer}, **extra}


async def records_of(client: ThreadwardenClient, thread: str, *kinds: str) -> list[dict[str, Any]]:
    return [r for r in await client.records(thread) if not kinds or r["kind"] in kinds]


async def child_rows(pool: asyncpg.Pool[Any], parent: str) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT submission_id, thread_id, state, outcome, parent_call_step, attempts"
        "  FROM threadwarden.submissions WHERE parent_submission_id = $1"
        " ORDER BY parent_call_step",
        parent,
    )
    return [dict(r) for r in rows]


async def waiting_for_children(client: ThreadwardenClient, thread: str) -> ThreadStatus:
    return await eventually(
        lambda: client.thread_status(thread),
        lambda s: bool(s.submissions) and s.submissions[0].state == "suspended",
        timeout_s=60,
        what=f"the parent on {thread} suspended",
    )


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_01_clean_run_one_child_one_join(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await client.submit(
        ids, agent_id="planner", input={"calls": [call(42)]}, idempotency_key="k"
    )
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed", outcome
    [child] = await child_rows(pool, receipt.submission_id)
    assert child["thread_id"] == child_thread_id_for(receipt.submission_id, 1)
    assert (child["state"], child["outcome"], child["attempts"]) == ("settled", "completed", 1)
    assert outcome.result == {
        "children": [
            {
                "submission_id": child["submission_id"],
                "thread_id": child["thread_id"],
                "outcome": "completed",
                "result": {"answer": 42},
                "reason": None,
            }
        ]
    }
    kinds = [r["kind"] for r in await records_of(client, ids)]
    assert kinds == ["call-started", "children-awaited", "call-joined", "settlement"]
    child_kinds = [r["kind"] for r in await records_of(client, child["thread_id"])]
    assert child_kinds == ["lineage", "settlement"]  # lineage before the child's first turn
    await assert_settled_once(client, ids, 1)
    await assert_settled_once(client, child["thread_id"], 1)
    await converged(client, ids)
    await converged(client, child["thread_id"])


@pytest.mark.usefixtures("family_worker")
async def test_children_scenario_06_two_children_awaited_together_one_wait_one_join_each(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await client.submit(
        ids, agent_id="planner", input={"calls": [call(1), call(2)], "together": True}
    )
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert [c["result"] for c in outcome.result["children"]] == [{"answer": 1}, {"answer": 2}]
    children = await child_rows(pool, receipt.submission_id)
    assert [c["parent_call_step"] for c in children] == [1, 2]
    awaited = await records_of(client, ids, "children-awaited")
    # Both calls were waited for together: one wait listing both (unless both had settled
    # before the wait, which then writes none).
    assert len(awaited) <= 1, await records_of(client, ids)
    if awaited:
        assert awaited[0]["body"]["children"] == [c["submission_id"] for c in children], (
            await records_of(client, ids),
            children,
        )
    joined = await records_of(client, ids, "call-joined")
    assert [r["body"]["submission_id"] for r in joined] == [
        c["submission_id"] for c in children
    ]
    await assert_settled_once(client, ids, 1)


@pytest.mark.usefixtures("family_worker")
async def test_children_a_failed_child_comes_back_as_a_failed_call_and_the_parent_goes_on(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    receipt = await client.submit(
        ids,
        agent_id="planner",
        input={
            "calls": [{"agent": "helper", "input": {"fail": "no data"}}, call(7)],
            "together": False,
        },
    )
    outcome = await client.result(receipt.submission_id, timeout=60)
    assert outcome.outcome == "completed"
    first, second = outcome.result["children"]
    assert (first["outcome"], first["reason"]) == ("failed", "no data")
    assert (second["outcome"], second["result"]) == ("completed", {"answer": 7})
    assert [c["outcome"] for c in await child_rows(pool, receipt.submission_id)] == [
        "failed",
        "completed",
    ]
