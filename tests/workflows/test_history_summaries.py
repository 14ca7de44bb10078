"""The recorded histories carry a summary on every step (what the Temporal UI shows beside
each activity and local activity); the live counterpart is tests/e2e/test_temporal_ui.py."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent

from tests.helpers.history import step_summaries

HISTORIES = Path(__file__).resolve().parent / "histories"


def _events(name: str) -> list[HistoryEvent]:
    [path] = sorted(HISTORIES.glob(f"host_pass_{name}_v*.json"))
    return list(json_format.Parse(path.read_text(), History()).events)


def test_a_recorded_history_carries_the_stepstep_summaries() -> None:
    # Dispatched heads (a binding that is not inline): run_head is an activity naming its
    # submission and thread; begin_pass (local) names its host. The head finishes the pass
    # itself, so no finish step appears.
    events = _events("settled_queued")
    heads = step_summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert heads and all(h.startswith("run_head sub_") and "(agent " in h for h in heads), heads
    assert all(" on replay-queued (agent queued)" in h for h in heads), heads
    steps = step_summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert set(steps) == {"begin_pass replay-queued"}, steps


def test_an_inline_head_runs_inside_begin_pass() -> None:
    # The scripted binding is inline and nothing else was due: each pass is one step.
    events = _events("settled")
    assert not step_summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    steps = step_summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert steps and set(steps) == {"begin_pass replay-settled"}, steps
