"""Stored host-workflow histories must keep replaying against the current workflow code.

A failure here means a change altered the workflow's commands. Nothing has been released, so
there are no patch markers: record fresh histories with
``python -m tests.workflows.record_histories`` (and delete the older host histories) in the
same commit as the change.
"""

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from threadwarden.workflows.host import HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_host_workflow_replays_stored_history(path: Path) -> None:
    replayer = Replayer(
        workflows=[HostWorkflow, SweeperWorkflow], data_converter=pydantic_data_converter
    )
    history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def test_replay_histories_are_present() -> None:
    assert len(HISTORIES) >= 2


def _timeline(name: str) -> list[str]:
    """A stored history as event kinds: a timer or an activity with its summary, a marker with
    its step."""
    path = next(p for p in HISTORIES if p.stem.startswith(f"host_pass_{name}_v"))
    events = WorkflowHistory.from_json(name, path.read_text()).events
    timeline = []
    for event in events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        if kind in ("TIMER_STARTED", "ACTIVITY_TASK_SCHEDULED"):
            kind += f" {event.user_metadata.summary.data.decode()}"
        elif kind == "MARKER_RECORDED":
            details = event.marker_recorded_event_attributes.details["data"].payloads[0]
            kind += f" {json.loads(details.data)['activity_type']}"
        timeline.append(kind)
    return timeline


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("chain_break", ['ACTIVITY_TASK_SCHEDULED "task_break: end a long workflow task"']),
        (
            "continue_as_new",
            [
                'ACTIVITY_TASK_SCHEDULED "task_break: continue as new"',
                "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
            ],
        ),
        ("worker_stop", ['ACTIVITY_TASK_SCHEDULED "task_break: the head\'s worker stops"']),
        (  # the failure's first backoff, under a second: slept by task_break, not a timer
            "begin_fault",
            [
                "MARKER_RECORDED rearm_failure",
                'ACTIVITY_TASK_SCHEDULED "task_break: wait for the alarm"',
            ],
        ),
    ],
)
def test_stored_history_shows_its_path(name: str, shown: list[str]) -> None:
    """Each history replayed above holds the path it is named for (its recording did not
    quietly take another). The run ends a workflow task with the no-op ``task_break``
    activity, and waits less than a second with it sleeping, never a timer: the server fires
    a timer shorter than its time shift (1 s by default) up to a second late (issue 39)."""
    timeline = _timeline(name)
    assert all(event in timeline for event in shown), timeline
    timers = [event for event in timeline if event.startswith("TIMER_STARTED")]
    assert timers in ([], ['TIMER_STARTED "idle: wake?"']), timeline  # the idle run's linger


def test_a_run_woken_from_its_linger_continues_as_new_without_a_task_break() -> None:
    """One turn at a time: each pass ends idle and the next turn's wake starts a new task, in
    which the run continues as new at once (no marker in it to lose), and the linger's wait
    restarts the chain's clock (no task break to end a long task between turns)."""
    timeline = _timeline("continue_as_new_after_wait")
    assert timeline.count("MARKER_RECORDED begin_pass") >= 100, timeline
    assert not [event for event in timeline if "task_break" in event], timeline
    assert timeline[-3:] == [
        "TIMER_CANCELED",
        "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
        "WORKFLOW_EXECUTION_CONTINUED_AS_NEW",
    ], timeline[-8:]


def test_a_pass_that_saw_a_turn_admitted_is_followed_at_once() -> None:
    """A caught-up pass during which a turn was admitted (its wake skipped): the next pass, which
    runs it, begins in the same task, with no wait for the alarm between."""
    timeline = _timeline("admitted_during_pass")
    finished = timeline.index("MARKER_RECORDED finish_caught_up")
    assert timeline[finished + 1 :].index("MARKER_RECORDED begin_pass") == 1, timeline
    assert not [event for event in timeline if "task_break" in event], timeline


def test_stored_heartbeat_split_has_begin_and_head_in_two_workflow_tasks() -> None:
    timeline = _timeline("heartbeat_split")
    begin = timeline.index("MARKER_RECORDED begin_pass")
    head = timeline.index("MARKER_RECORDED run_head")
    assert "WORKFLOW_TASK_COMPLETED" in timeline[begin:head], timeline
