"""The idle sweeper is cheap (history events counted, not timed) and still repairs a lost wake.

The sweeper runs on a worker of its own here, wired with `Sweeps` and an idle interval, so that
its events are counted alone and a repaired wake can only have come from it (the host workflows
run on a worker without a sweeper).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker

from tests.helpers.polling import eventually
from threadwarden.activities.sweep import SweepActivities
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.sweep import Sweeps
from threadwarden.worker.plugin import start_sweeper
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows.contracts import sweeper_workflow_id
from threadwarden.workflows.sweeper import ITERATIONS_PER_RUN, SweeperWorkflow

IDLE_MS = 400
"""A short idle interval for the tests; the cost is extrapolated to the default one."""
BUSY_MS = 100
GRACE_MS = 200
EVENTS_PER_HOUR_BUDGET = 400
"""SPEC, Sweeper: an idle deployment writes at most this many history events per hour."""


@contextlib.asynccontextmanager
async def sweeper(client: Client, pool: asyncpg.Pool[Any], *, wakes_to: str) -> AsyncIterator[str]:
    """A worker running only the sweeper (on its own queue), waking hosts onto ``wakes_to``."""
    queue = f"sweep-{uuid.uuid4().hex[:10]}"
    sweeps = SweepActivities(
        Sweeps(pool),
        client,
        task_queue=wakes_to,
        interval_ms=BUSY_MS,
        idle_interval_ms=IDLE_MS,
        grace_ms=GRACE_MS,
        failpoints=Failpoints(),
    )
    async with Worker(
        client, task_queue=queue, workflows=[SweeperWorkflow], activities=[sweeps.sweep]
    ):
        await start_sweeper(client, queue)
        yield sweeper_workflow_id(queue)


async def events(client: Client, workflow_id: str) -> list[HistoryEvent]:
    return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)


def timers(history: list[HistoryEvent]) -> list[int]:
    """The sweeper's sleeps in order, in milliseconds."""
    return [
        e.timer_started_event_attributes.start_to_fire_timeout.ToMilliseconds()
        for e in history
        if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]


def fired(history: list[HistoryEvent]) -> list[int]:
    """Positions of the TimerFired events: one per finished iteration."""
    return [i for i, e in enumerate(history) if e.event_type == EventType.EVENT_TYPE_TIMER_FIRED]


async def test_an_idle_sweeper_writes_at_most_400_history_events_an_hour(
    connections: Connections, pool: asyncpg.Pool[Any]
) -> None:
    client = await connect_temporal(connections.temporal_address, "default")
    async with sweeper(client, pool, wakes_to=f"nobody-{uuid.uuid4().hex[:8]}") as sweeper_id:
        history = await eventually(
            lambda: events(client, sweeper_id),
            lambda h: len(fired(h)) >= 5,
            what="five idle sweeps",
        )
    # Nothing is armed: every sweep sleeps the idle interval.
    assert set(timers(history)) == {IDLE_MS}
    kinds = [e.event_type for e in history]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds  # a local activity
    positions = fired(history)
    per_iteration = {b - a for a, b in zip(positions, positions[1:], strict=False)}
    # Workflow task scheduled, started, completed; the sweep's marker; timer started, fired.
    assert per_iteration == {6}
    steady = [EventType.Name(k) for k in kinds[positions[0] + 1 : positions[1] + 1]]
    assert steady == [
        "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED",
        "EVENT_TYPE_WORKFLOW_TASK_STARTED",
        "EVENT_TYPE_WORKFLOW_TASK_COMPLETED",
        "EVENT_TYPE_MARKER_RECORDED",
        "EVENT_TYPE_TIMER_STARTED",
        "EVENT_TYPE_TIMER_FIRED",
    ]
    # A run's extra events: its start (up to the first timer, less a steady iteration's share)
    # and its end (a workflow task and the continue-as-new event).
    head = positions[0] + 1 - 6
    tail = 4
    idle_s = Settings().sweep_idle_interval_ms / 1000
    iterations_per_hour = 3600 / idle_s
    runs_per_hour = iterations_per_hour / ITERATIONS_PER_RUN
    per_hour = iterations_per_hour * 6 + runs_per_hour * (head + tail)
    assert idle_s == 90
    assert per_hour <= EVENTS_PER_HOUR_BUDGET, per_hour
    assert round(per_hour) == 241  # 240 for the sweeps, about one for the runs' starts and ends


async def test_an_idle_sweeper_repairs_a_lost_wake_and_then_idles_again(
    settings: Settings,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    client: ThreadwardenClient,
    ids: str,
) -> None:
    temporal = await connect_temporal(connections.temporal_address, "default")
    hosts = running_worker(settings, connections, sweeper=False)
    async with hosts, sweeper(temporal, pool, wakes_to=settings.task_queue) as sweeper_id:
        await eventually(
            lambda: events(temporal, sweeper_id),
            lambda h: len(fired(h)) >= 1 and timers(h)[-1] == IDLE_MS,
            what="the sweeper idles",
        )
        # Committed, never signalled (the process died in between); overdue long since.
        receipt = await Admissions(pool, minimum_alarm_delay_ms=50).admit(
            thread_id=f"{ids}-lost", agent_id="scripted", input=[{"say": "anyone?"}]
        )
        await pool.execute(
            "UPDATE threadwarden.hosts SET alarm_at = clock_timestamp() - interval '1 minute'"
            " WHERE host_id = $1",
            receipt.host_id,
        )
        status = await eventually(
            lambda: client.thread_status(receipt.thread_id),
            lambda s: s.submissions[0].state == "settled",
            what="settled after the sweeper's wake",
        )
        assert status.submissions[0].outcome == "completed"
        history = await eventually(
            lambda: events(temporal, sweeper_id),
            lambda h: timers(h)[-1] == IDLE_MS and BUSY_MS in timers(h),
            what="idle again after the repair",
        )
    sleeps = timers(history)
    # Idle, then busy from the sweep that found the overdue host, then idle again.
    repaired = sleeps.index(BUSY_MS)
    assert repaired > 0
    # Before it: the idle interval, or less when an alarm was about to come due (the
    # admission armed one before the test moved it into the past).
    assert sleeps[0] == IDLE_MS and all(s <= IDLE_MS for s in sleeps[:repaired])
