"""The recorded histories carry a summary on every step (what the Temporal UI shows beside
each activity and local activity); the live counterpart is tests/e2e/test_temporal_ui.py."""

from __future__ import annotations

import json
from pathlib import Path

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent

HISTORIES = Path(__file__).resolve().parent / "histories"


def _summary(event: HistoryEvent) -> str | None:
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return None
    payload: Payload = event.user_metadata.summary
    return str(json.loads(payload.data))


def _summaries(events: list[HistoryEvent], kind: int) -> list[str]:
    return [s for e in events if e.event_type == kind and (s := _summary(e)) is not None]


def _events(name: str) -> list[HistoryEvent]:
    [path] = sorted(HISTORIES.glob(f"host_pass_{name}_v*.json"))
    return list(json_format.Parse(path.read_text(), History()).events)


def test_a_recorded_history_carries_the_step_summaries() -> None:
    # Dispatched heads (a binding that is not inline): run_head is an activity naming its
    # submission and thread; begin_pass (local) names its host. The head finishes the pass
    # itself, so no finish step appears.
    events = _events("settled_queued")
    heads = _summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert heads and all(h.startswith("run_head sub_") and "(agent " in h for h in heads), heads
    assert all(" on replay-queued (agent queued)" in h for h in heads), heads
    steps = _summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert set(steps) == {"begin_pass replay-queued"}, steps


def test_an_inline_head_runs_inside_begin_pass() -> None:
    # The scripted binding is inline and nothing else was due: each pass is one step.
    events = _events("settled")
    assert not _summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    steps = _summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert steps and set(steps) == {"begin_pass replay-settled"}, steps
