"""Wakes are hints: the durable alarm and the sweeper converge; hosts are visible in Temporal."""

from __future__ import annotations

from typing import Any

import asyncpg
from temporalio.client import WorkflowExecutionStatus

from ledger.admission import Admissions
from tests.helpers.polling import eventually
from worker.client import ThreadwardenClient
from worker.runtime import Connections, connect_temporal
from workflows.contracts import host_workflow_id


async def test_sweeper_processes_a_mutation_whose_signal_was_lost(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    # Commit through the ledger alone, as if the process died between commit and signal.
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    receipt = await admissions.admit(
        thread_id=f"{ids}-lost", agent_id="scripted", input=[{"say": "nobody signalled me"}]
    )
    status = await eventually(
        lambda: client.thread_status(receipt.thread_id),
        lambda s: s.submissions[0].state == "settled",
        what="settled by the sweeper's wake",
    )
    assert status.submissions[0].outcome == "completed"


async def test_idle_host_completes_its_workflow_and_shows_search_attributes(
    worker: None, client: ThreadwardenClient, connections: Connections, ids: str
) -> None:
    thread = f"{ids}-visible"
    await client.submit(thread, agent_id="scripted", input=[{"say": "hello"}])
    await eventually(
        lambda: client.thread_status(thread),
        lambda s: s.submissions[0].state == "settled",
        what="settled",
    )
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(host_workflow_id(thread))
    described = await eventually(
        handle.describe,
        lambda d: d.status == WorkflowExecutionStatus.COMPLETED,
        what="idle host workflow completed",
    )
    query = (
        f"WorkflowId = '{host_workflow_id(thread)}' AND ThreadwardenLastOutcome = 'actionable'"
        " AND ThreadwardenNonterminal = 0"
    )

    async def listed() -> list[str]:
        return [w.id async for w in temporal.list_workflows(query)]

    found = await eventually(listed, bool, what="host listed by its search attributes")
    assert found[0] == host_workflow_id(thread)
    assert described.typed_search_attributes is not None


async def test_work_for_an_unregistered_agent_stays_pending_with_the_alarm_armed(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    thread = f"{ids}-nobinding"
    await client.submit(thread, agent_id="no-such-agent", input={"anything": True})
    host = await eventually(
        lambda: client.host_status(thread),
        lambda h: h.retry is not None and h.retry.stalls >= 2,
        what="stalled passes recorded as durable backoff",
    )
    status = await client.thread_status(thread)
    assert status.submissions[0].state == "ready"
    assert host.processed < host.dirty
    assert host.alarm_at is not None
