"""Deploys and slow inline heads (issues 28, 39): a pass survives a graceful worker shutdown at
any moment, and an inline binding's slow head (a step declared longer than the inline budget)
never holds the local-activity slots the other hosts' passes need.

Driven by failpoints and by what Temporal's history shows, not by timing: the deploy lands
while the head is paused inside its attempt and the auxiliary work beside it is in flight.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client

from tests.helpers.checks import assert_settled_once, converged, say, submission_rows
from tests.helpers.hosts import FakeHost
from tests.helpers.polling import eventually
from tests.helpers.workers import Workers
from threadwarden.client.client import ThreadwardenClient
from threadwarden.workflows.contracts import host_workflow_id


async def _events(temporal: Client, host: str) -> list[Any]:
    """Every event of the host's runs, oldest run first."""
    events: list[Any] = []
    query = f"WorkflowId = '{host_workflow_id(host)}'"
    runs = [run async for run in temporal.list_workflows(query)]
    for run in sorted(runs, key=lambda r: r.start_time):
        handle = temporal.get_workflow_handle(run.id, run_id=run.run_id)
        events.extend((await handle.fetch_history()).events)
    return events


def _wave_scheduled(events: list[Any]) -> bool:
    return any(
        e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "host_wave"
        for e in events
    )


async def test_a_deploy_beside_an_inline_head_and_in_flight_auxiliary_work_converges(
    workers: Workers,
    client: ThreadwardenClient,
    temporal_client: Client,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    failpoints = workers.failpoints
    failpoints.arm("attempt:append", pause=True)  # inside the head's first committed step
    # Its waves run until cancelled (at the latest when the native work is done and their 1 s
    # join bound passed): auxiliary work in flight beside every pass's native work.
    async with workers.running(host=FakeHost(1_000, hang=True)) as running:
        await client.submit(ids, agent_id="scripted", input=say("survives the deploy"))
        await failpoints.reached("attempt:append")
        # The wave beside the head is on the server (a workflow task completed since the
        # pass began): a deploy now lands beside in-flight auxiliary work.
        await eventually(
            lambda: _events(temporal_client, ids),
            _wave_scheduled,
            timeout_s=60,
            what="the host wave scheduled beside the paused head",
        )
        await running.shutdown()  # SIGTERM's path: the worker stops gracefully

    async with workers.running(host=FakeHost(1_000, hang=True)):
        status = await assert_settled_once(client, ids, 1)
        await converged(client, ids)
    assert status.submissions[0].outcome == "completed"
    events = await _events(temporal_client, ids)
    failed_tasks = [
        e.workflow_task_failed_event_attributes.cause
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        # (A completion refused because a wake arrived meanwhile is the server's, not a fault.)
        and e.workflow_task_failed_event_attributes.cause
        != WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    ]
    assert failed_tasks == []  # no workflow task failed, on the stopping worker or after it
    [row] = await submission_rows(pool, ids)
    assert row["state"] == "settled"


async def test_slow_inline_heads_filling_a_worker_leave_room_for_other_hosts(
    workers: Workers,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As many slow heads of an inline binding as the worker has local-activity slots: each
    step that would outlive the inline budget declares its length (the scripted ``sleep_ms``
    does), so the inline attempt yields before it and hands the head to its agent's queue,
    and another host's quick submission still settles, with no begin starved of a slot."""
    caplog.set_level(logging.WARNING)
    slots, failpoints = 4, workers.failpoints
    failpoints.arm("claim", observe=True)
    slow = [f"{ids}-slow-{n}" for n in range(slots)]
    async with workers.tuned(max_concurrent_local_activities=slots, inline_budget_ms=500).running():
        for host in slow:
            await client.submit(host, agent_id="scripted", input=[{"sleep_ms": 40_000}])

        async def claims() -> int:
            return failpoints.hits.get("claim", 0)

        await eventually(claims, lambda hits: hits >= slots, what="every slow head claimed")
        quick = f"{ids}-quick"
        await client.submit(quick, agent_id="scripted", input=say("not starved"))
        await assert_settled_once(client, quick, 1)

        # Each slow head's inline attempt yielded before its 40 s sleep (nothing of it started)
        # and handed the head over; its second attempt sleeps, on the agent's queue.
        async def attempts() -> list[int]:
            return [(await submission_rows(pool, host))[0]["attempts"] for host in slow]

        await eventually(attempts, lambda counts: all(n == 2 for n in counts))
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if m.startswith(("begin failed", "sweep failed"))]
    # No sleep started inline: none held its slot until the attempt's hard bound cut it off.
    assert not [m for m in messages if "cut off at its hard bound" in m]
