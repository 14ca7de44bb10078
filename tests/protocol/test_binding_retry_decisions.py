"""plan_binding_retry: the per-submission binding backoff, its caps and its log limit; the
binding delay the finish takes over the lanes eligible before the attempt."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from threadwarden.protocol.decisions import (
    BINDING_REPORT_INTERVAL_MS,
    MAX_BINDING_ATTEMPTS,
    BindingRetry,
    binding_delay,
    plan_binding_retry,
)

NOW = 1_700_000_000_000


def _fail(previous: BindingRetry | None, now: int) -> tuple[BindingRetry | None, bool]:
    return plan_binding_retry(previous, thread_id="t", submission_id="s", failed=True, now=now)


def test_binding_retry_first_failure_is_attempt_one_five_seconds_out_and_reported() -> None:
    entry, report = _fail(None, NOW)
    assert entry == BindingRetry("t", "s", 1, NOW + 5_000, NOW)
    assert report


def test_binding_retry_persistent_failure_backs_off_5_10_20_40_60_60_seconds() -> None:
    entry, now, delays = None, NOW, []
    for _ in range(6):
        entry, _ = _fail(entry, now)
        assert entry is not None
        delays.append(entry.not_before - now)
        now = entry.not_before
    assert delays == [5_000, 10_000, 20_000, 40_000, 60_000, 60_000]


def test_binding_retry_reports_again_only_after_fifteen_minutes() -> None:
    first, _ = _fail(None, NOW)
    assert first is not None
    quiet, report = _fail(first, NOW + BINDING_REPORT_INTERVAL_MS - 1)
    assert not report and quiet is not None and quiet.reported_at == NOW
    loud, report = _fail(quiet, NOW + BINDING_REPORT_INTERVAL_MS)
    assert report and loud is not None and loud.reported_at == NOW + BINDING_REPORT_INTERVAL_MS


def test_binding_retry_success_removes_the_entry_without_reporting() -> None:
    previous, _ = _fail(None, NOW)
    assert plan_binding_retry(
        previous, thread_id="t", submission_id="s", failed=False, now=NOW
    ) == (None, False)


@given(gaps=st.lists(st.integers(min_value=0, max_value=2_000_000), min_size=1, max_size=60))
def test_binding_retry_attempts_capped_delay_bounded_and_report_times_monotonic(
    gaps: list[int],
) -> None:
    entry: BindingRetry | None = None
    now = NOW
    for gap in gaps:
        now += gap
        previous = entry
        entry, report = _fail(previous, now)
        assert entry is not None
        assert 1 <= entry.attempts <= MAX_BINDING_ATTEMPTS
        assert 5_000 <= entry.not_before - now <= 60_000
        assert entry.reported_at == (now if report else previous.reported_at if previous else now)
        if previous is not None:
            assert entry.attempts == min(MAX_BINDING_ATTEMPTS, previous.attempts + 1)
            assert entry.reported_at >= previous.reported_at


def test_binding_delay_waits_for_the_earliest_eligible_lane_and_never_goes_negative() -> None:
    assert binding_delay([], NOW) == 0  # no lane was eligible
    assert binding_delay([NOW + 5_000], NOW) == 5_000  # the only lane is blocked
    assert binding_delay([NOW + 5_000, NOW], NOW) == 0  # another lane may run now
    assert binding_delay([NOW + 5_000, NOW + 60_000], NOW) == 5_000
    assert binding_delay([NOW - 10], NOW) == 0  # a retry already due
