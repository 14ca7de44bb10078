"""The tolerances end-to-end tests compare a host's alarm with."""

from __future__ import annotations

from datetime import datetime, timedelta

from threadwarden.ledger.models import from_ms, to_ms

MIN_DELAY = timedelta(milliseconds=50)
"""minimum_alarm_delay with the default 100 ms backoff base."""
CLOCK_SLACK = timedelta(milliseconds=25)
"""Epoch-millisecond truncation plus scheduling noise between the workflow clock and ours."""


def whole_ms(instant: datetime) -> datetime:
    """``instant`` truncated to whole milliseconds (the precision alarms are kept in)."""
    return from_ms(to_ms(instant))
