"""``python -m bench.task_break``: how a break's latency and event count are read from a probe's
history, and its flag (no services needed; the measurement itself is in bench/README.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from bench import task_break

START = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def _events(*kinds_at_ms: tuple[str, int]) -> list[HistoryEvent]:
    events = []
    for kind, ms in kinds_at_ms:
        event = HistoryEvent(event_type=EventType.Value(f"EVENT_TYPE_{kind}"))
        event.event_time.FromDatetime(START + timedelta(milliseconds=ms))
        events.append(event)
    return events


def test_a_break_runs_from_a_task_completed_to_the_next_task_started() -> None:
    events = _events(
        ("WORKFLOW_EXECUTION_STARTED", 0),
        ("WORKFLOW_TASK_SCHEDULED", 0),
        ("WORKFLOW_TASK_STARTED", 2),
        ("WORKFLOW_TASK_COMPLETED", 10),
        ("TIMER_STARTED", 10),
        ("TIMER_FIRED", 1_005),
        ("WORKFLOW_TASK_SCHEDULED", 1_005),
        ("WORKFLOW_TASK_STARTED", 1_010),  # a break of 1,000 ms
        ("WORKFLOW_TASK_COMPLETED", 1_012),
        ("ACTIVITY_TASK_SCHEDULED", 1_012),
        ("ACTIVITY_TASK_STARTED", 1_012),
        ("ACTIVITY_TASK_COMPLETED", 1_014),
        ("WORKFLOW_TASK_SCHEDULED", 1_014),
        ("WORKFLOW_TASK_STARTED", 1_015),  # a break of 3 ms
        ("WORKFLOW_TASK_COMPLETED", 1_020),
        ("WORKFLOW_EXECUTION_COMPLETED", 1_020),
    )
    assert task_break.gaps_ms(events) == [1000.0, 3.0]
    # Between the first task's end and the last's: a timer's 2 events and an activity's 3,
    # each with its workflow task's 3.
    assert task_break.between_breaks(events) == (2 + 3) + (3 + 3)


def test_tries_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        task_break.main(["--tries", "0"])
    assert stop.value.code == 2
    assert "--tries: expected a positive integer, got 0" in capsys.readouterr().err
