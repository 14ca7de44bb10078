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


def test_a_recorded_history_carries_the_step_summaries() -> None:
    [path] = sorted(HISTORIES.glob("host_pass_settled_v*.json"))
    history = json_format.Parse(path.read_text(), History())
    events = list(history.events)
    heads = _summaries(events, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert heads and all(h.startswith("run_head sub_") and "(agent " in h for h in heads), heads
    steps = _summaries(events, EventType.EVENT_TYPE_MARKER_RECORDED)
    assert any(s.startswith("begin_pass ") for s in steps), steps
    # The common pass: begin_pass (local) names its host, run_head its submission and thread
    # (it finishes the pass itself, so no finish step appears).
    assert set(steps) == {"begin_pass replay-settled"}, steps
    assert all(" on replay-settled (agent scripted)" in h for h in heads), heads
