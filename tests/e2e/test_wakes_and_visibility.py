"""Wakes are hints: the durable alarm and the sweeper converge; hosts are visible in Temporal."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from tests.helpers.checks import assert_settled_once, converged, say
from tests.helpers.idle import idle_host
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.ledger.admission import Admissions
from threadwarden.workflows.contracts import host_workflow_id, sweeper_workflow_id
from threadwarden.workflows.host import NONTERMINAL, PASS_OUTCOME, PHASE


async def signals_received(temporal: Client, workflow_id: str) -> int:
    """Wake signals delivered to every run of ``workflow_id``."""
    count = 0
    async for run in temporal.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = temporal.get_workflow_handle(workflow_id, run_id=run.run_id)
        async for event in handle.fetch_history_events():
            count += event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return count


async def test_a_mutation_racing_a_pass_converges_without_a_signal_or_the_sweeper(
    workers: Workers, client: ThreadwardenClient, ids: str
) -> None:
    """The lost-wake race, forced: a submit lands while a caught-up pass runs. Begin pre-armed
    the alarm, so the submit sends no wake (the pass is to see it); the finish must keep the
    alarm for the generation it did not observe, and the run's own timer must serve it. With
    no sweeper and no signal, a finish that let the alarm go would strand the submission."""
    failpoints = workers.failpoints
    async with workers.running(sweeper=False) as worker:
        temporal, sweeper = worker.client, sweeper_workflow_id(workers.settings.task_queue)
        with pytest.raises(RPCError) as absent:
            await temporal.get_workflow_handle(sweeper).describe()
        assert absent.value.status == RPCStatusCode.NOT_FOUND
        await idle_host(client, workers.connections, ids, "first")  # the host's run completed

        failpoints.arm("maintenance:finish:before", pause=True)
        await client.wake(ids, reason="test")  # a new run: one caught-up pass, paused
        await failpoints.reached("maintenance:finish:before")
        raced = await client.submit(ids, agent_id="scripted", input=say("raced"))
        assert raced.created and not raced.wake  # the begin's pre-arm is earlier: no signal
        failpoints.release("maintenance:finish:before")

        status = await assert_settled_once(client, ids, 2)
        assert status.submissions[1].submission_id == raced.submission_id
        await converged(client, ids)
        # The first submit's wake and the test's; the raced admission signalled nothing.
        assert await signals_received(temporal, host_workflow_id(ids)) == 2


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
    # The last pass settled the head (actionable) or, when a wake came after it, was caught up.
    outcome = described.typed_search_attributes.get(PASS_OUTCOME)
    assert outcome in ("actionable", "caught-up")
    assert described.typed_search_attributes.get(NONTERMINAL) == 0
    query = (
        f"WorkflowId = '{host_workflow_id(thread)}' AND ThreadwardenPassOutcome = '{outcome}'"
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


async def test_an_idle_host_run_waits_for_a_wake_before_it_completes(
    workers: Workers, client: ThreadwardenClient, connections: Connections, ids: str
) -> None:
    """With ``idle_linger_ms`` (2 s by default) an idle host's run stays open, shown ``idle``,
    and the next turn's wake lands in it: no wake meets a run as it completes (the server
    answers such a wake about a second later, in a new run)."""
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(host_workflow_id(ids))
    async with workers.tuned(idle_linger_ms=10_000).running():
        await client.submit(ids, agent_id="scripted", input=[{"say": "one"}])
        idle = await eventually(
            handle.describe,
            lambda d: (
                d.status == WorkflowExecutionStatus.RUNNING
                and d.typed_search_attributes.get(PHASE) == "idle"
            ),
            what="the idle host's run waiting for a wake",
        )
        await client.submit(ids, agent_id="scripted", input=[{"say": "two"}])
        await assert_settled_once(client, ids, 2)
        later = await handle.describe()
    assert later.run_id == idle.run_id  # the second turn ran in the run that waited
