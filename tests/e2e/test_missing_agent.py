"""A head for an agent no running worker has waits as `binding` at once: the pass asks Temporal
whether any worker polls the agent's task queue instead of waiting out the head's
schedule-to-start timeout (issue 20 item 7).

These tests run with the product's 60 s ``head_start_timeout_ms``: a head that waited to be
started would show no wait for a whole minute, and its history would hold a ``run_head``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.helpers import child_agents
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers, with_bindings
from threadwarden.activities.pollers import HeadPollers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings
from threadwarden.views import SubmissionView
from threadwarden.worker.capacity import head_queues
from threadwarden.workflows import contracts

# Well under the 60 s a head would wait to be started: reaching it proves no such wait.
SEEN_WITHIN_S = 30


@pytest.fixture
async def patient(workers: Workers) -> AsyncIterator[Settings]:
    """A worker with the planner and scripted bindings, and the product's head start timeout."""
    patient = workers.tuned(head_start_timeout_ms=Settings().head_start_timeout_ms)
    assert patient.settings.head_start_timeout_ms == 60_000
    async with patient.running(with_bindings(*child_agents.PLANNER)):
        yield patient.settings


async def waits_for_binding(client: ThreadwardenClient, thread: str) -> SubmissionView:
    status = await eventually(
        lambda: client.thread_status(thread),
        lambda s: bool(s.submissions) and s.submissions[0].waiting_for == "binding",
        timeout_s=SEEN_WITHIN_S,
        what=f"the head on {thread} waiting for its binding",
    )
    return status.submissions[0]


async def run_heads_scheduled(temporal: Client, thread: str) -> int:
    """``run_head`` activities the thread's host workflow scheduled (in all its runs)."""
    handle = temporal.get_workflow_handle(contracts.host_workflow_id(thread))
    count = 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            count += scheduled.activity_type.name == contracts.RUN_HEAD
    return count


async def test_a_head_for_an_agent_no_worker_has_waits_for_binding_without_a_start_timeout(
    patient: Settings, client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    receipt = await client.submit(ids, agent_id="ghost", input={"n": 1})
    view = await waits_for_binding(client, ids)
    assert (view.submission_id, view.state, view.attempts) == (receipt.submission_id, "ready", 0)
    host = await client.host_status(ids)
    assert [r.submission_id for r in host.binding_retries] == [receipt.submission_id]
    assert await run_heads_scheduled(temporal_client, ids) == 0  # never dispatched to wait


async def test_a_child_for_an_agent_no_worker_has_waits_for_binding_at_once(
    patient: Settings, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """The planner delegates to the helper, which no running worker has."""
    receipt = await client.submit(
        ids, agent_id="planner", input={"calls": [{"agent": "helper", "input": {"answer": 1}}]}
    )
    child_thread = await eventually(
        lambda: pool.fetchval(
            "SELECT thread_id FROM threadwarden.submissions WHERE parent_submission_id = $1",
            receipt.submission_id,
        ),
        lambda thread: thread is not None,
        what="the child admitted",
    )
    view = await waits_for_binding(client, child_thread)
    assert (view.state, view.attempts) == ("ready", 0)
    parent = (await client.thread_status(ids)).submissions[0]
    assert (parent.state, parent.waiting_for) == ("suspended", "child")


async def test_head_pollers_ask_temporal_only_for_queues_this_worker_does_not_poll(
    patient: Settings, temporal_client: Client
) -> None:
    queue = patient.task_queue
    bindings = with_bindings()
    # A worker with the scripted binding runs (the fixture): Temporal lists its pollers.
    asked = HeadPollers(temporal_client, task_queue=queue)
    assert (
        await eventually(
            lambda: asked.unpolled("scripted", None), lambda unpolled: not unpolled, what="pollers"
        )
        is False
    )
    assert await asked.unpolled("ghost", None) is True
    digest = bindings.bindings["scripted"].digest
    assert await asked.unpolled("scripted", "another-digest") is True  # no worker at that digest
    # Its own queues are polled without asking: no worker polls "elsewhere" (Temporal would
    # say unpolled), but this process's own queues there count as polled.
    local = HeadPollers(
        temporal_client, task_queue="elsewhere", local=head_queues("elsewhere", bindings)
    )
    assert await local.unpolled("scripted", digest) is False
    assert await local.unpolled("scripted", None) is False
    assert await local.unpolled("ghost", None) is True


async def test_a_worker_gone_a_moment_ago_still_counts_its_heads_wait_out_the_start_timeout(
    workers: Workers, client: ThreadwardenClient, temporal_client: Client, ids: str
) -> None:
    """Temporal lists a worker as a poller for a while after its last poll: a head for its
    agent is dispatched and waits ``head_start_timeout_ms`` (3 s in the tests), as before."""
    asked = HeadPollers(temporal_client, task_queue=workers.settings.task_queue)
    async with workers.process("helper", bindings=f"{child_agents.__name__}:HELPER"):
        await eventually(
            lambda: asked.unpolled("helper", None), lambda unpolled: not unpolled, what="polled"
        )
    async with workers.running():  # scripted only: no helper
        await client.submit(ids, agent_id="helper", input={"answer": 1})
        view = await waits_for_binding(client, ids)
        assert (view.state, view.attempts) == ("ready", 0)
        assert await run_heads_scheduled(temporal_client, ids) >= 1  # dispatched, never started
