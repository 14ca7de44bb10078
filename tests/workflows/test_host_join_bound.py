"""The bound of finishAuxiliary's join of the running host wave (scenario 31):
min(allowance, max(1 ms, dispatch_until - now))."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from threadwarden.workflows.auxiliary import host_join_bound

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_host_join_bound_is_the_allowance_when_time_is_left() -> None:
    until = START + timedelta(minutes=14)
    assert host_join_bound(500, until, START) == timedelta(milliseconds=500)


def test_host_join_bound_is_the_time_left_before_dispatch_until() -> None:
    until = START + timedelta(milliseconds=200)
    assert host_join_bound(500, until, START) == timedelta(milliseconds=200)


def test_host_join_bound_is_at_least_one_millisecond_past_dispatch_until() -> None:
    assert host_join_bound(500, START, START + timedelta(seconds=3)) == timedelta(milliseconds=1)


@given(
    allowance=st.integers(min_value=1, max_value=300_000),
    left_ms=st.integers(min_value=-900_000, max_value=900_000),
)
def test_host_join_bound_formula(allowance: int, left_ms: int) -> None:
    until = START + timedelta(milliseconds=left_ms)
    expected = min(allowance, max(1, left_ms))
    assert host_join_bound(allowance, until, START) == timedelta(milliseconds=expected)
