"""Temporal-side counts of one measured side (`HistoryCounts`), from the histories of its task
queue's workflows.

Every run on the task queue is listed through visibility (continued-as-new and closed runs
included), polled until the listing is stable, and each run's full history is fetched:

- ``events``: history events of the measured units' workflows (hosts / entities), all runs;
- ``sweeper_events``: the same for the sweeper workflow, reported apart;
- ``activity_timeouts``: ACTIVITY_TASK_TIMED_OUT events, plus earlier attempts of a retried
  activity whose last failure was a timeout, plus local-activity markers failed by a timeout;
- ``workflow_task_timeouts``: WORKFLOW_TASK_TIMED_OUT events;
- ``activity_failures``: ACTIVITY_TASK_FAILED events and failed local-activity markers;
- ``workflow_tasks``, ``activity_tasks``: tasks the server handed a worker (WORKFLOW_TASK_STARTED
  and ACTIVITY_TASK_STARTED events, eager ones included; a retried activity's attempts count once
  each), and ``local_activities`` (markers: run inside a workflow task, no task of their own).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from temporalio.api.enums.v1 import EventType, TimeoutType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from bench.measure import HistoryCounts, wait_until

LIST_DEADLINE_S = 30.0
FETCH_CONCURRENCY = 8


async def list_runs(client: Client, task_queue: str, expected: set[str]) -> list[WorkflowExecution]:
    """Every run on ``task_queue``, once the listing shows ``expected`` ids and stops changing."""
    seen: list[frozenset[tuple[str, str, object]]] = []
    runs: list[WorkflowExecution] = []

    async def probe() -> bool:
        nonlocal runs
        runs = [r async for r in client.list_workflows(f"TaskQueue = '{task_queue}'")]
        keys = frozenset((r.id, r.run_id, r.status) for r in runs)
        stable = seen == [keys] and expected <= {r.id for r in runs}
        seen[:] = [keys]
        return stable

    # Visibility may still move (a timed-out side's runs are open): then use the last listing.
    with contextlib.suppress(TimeoutError):
        await wait_until(probe, bool, timeout_s=LIST_DEADLINE_S, what="a stable listing")
    return runs


async def count(
    client: Client,
    runs: Iterable[WorkflowExecution],
    *,
    measured: Callable[[str], bool],
    sweeper: str,
) -> HistoryCounts:
    """Counts over the histories of ``runs``: the measured workflows' and the sweeper's."""
    counts = HistoryCounts()
    limit = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(run: WorkflowExecution) -> None:
        async with limit:
            history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        if run.id == sweeper:
            counts.sweeper_events += len(history.events)
            return
        counts.runs += 1
        counts.events += len(history.events)
        for event in history.events:
            _tally(counts, event)

    await asyncio.gather(*(one(r) for r in runs if run_matches(r.id, measured, sweeper)))
    return counts


def run_matches(workflow_id: str, measured: Callable[[str], bool], sweeper: str) -> bool:
    return workflow_id == sweeper or measured(workflow_id)


async def terminate_open(client: Client, runs: Iterable[WorkflowExecution]) -> None:
    """Terminate the side's runs still open (its workers are gone): keep the server quiet."""
    for run in runs:
        if run.status == WorkflowExecutionStatus.RUNNING:
            handle = client.get_workflow_handle(run.id, run_id=run.run_id)
            try:
                await handle.terminate(reason="bench side finished")
            except Exception:  # already closed since the listing: nothing to do
                continue


def _tally(counts: HistoryCounts, event: HistoryEvent) -> None:
    kind = event.event_type
    name = EventType.Name(kind).removeprefix("EVENT_TYPE_")
    counts.by_type[name] = counts.by_type.get(name, 0) + 1
    if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        counts.workflow_tasks += 1
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
        counts.activity_timeouts += 1
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        started = event.activity_task_started_event_attributes
        counts.activity_tasks += max(started.attempt, 1)
        if started.attempt > 1 and _is_timeout(started.last_failure):
            counts.activity_timeouts += started.attempt - 1
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        counts.workflow_task_timeouts += 1
        timeout = event.workflow_task_timed_out_event_attributes.timeout_type
        _add(counts.workflow_task_problems, f"timed_out:{TimeoutType.Name(timeout)[13:]}")
    elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
        cause = event.workflow_task_failed_event_attributes.cause
        _add(counts.workflow_task_problems, f"failed:{WorkflowTaskFailedCause.Name(cause)[27:]}")
    elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
        counts.activity_failures += 1
    elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
        marker = event.marker_recorded_event_attributes
        counts.local_activities += marker.marker_name == "core_local_activity"
        if marker.HasField("failure"):
            if _is_timeout(marker.failure):
                counts.activity_timeouts += 1
            else:
                counts.activity_failures += 1


def _add(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _is_timeout(failure: Failure) -> bool:
    """Whether the failure, or any failure in its cause chain, is a timeout."""
    current: Failure | None = failure
    while current is not None and current.ByteSize() > 0:
        if current.HasField("timeout_failure_info"):
            return True
        current = current.cause if current.HasField("cause") else None
    return False
