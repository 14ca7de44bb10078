"""Reading Temporal workflow histories in tests: the summaries steps carry (what the Temporal UI
shows beside each activity and local activity)."""

from __future__ import annotations

import json

from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent


def step_summary(event: HistoryEvent) -> str | None:
    """The summary the event's step carries, or None."""
    if not event.HasField("user_metadata") or not event.user_metadata.HasField("summary"):
        return None
    payload: Payload = event.user_metadata.summary
    return str(json.loads(payload.data))


def step_summaries(events: list[HistoryEvent], kind: int) -> list[str]:
    """The summaries of the events of type ``kind`` (an ``EventType``) that carry one."""
    return [s for e in events if e.event_type == kind and (s := step_summary(e)) is not None]
