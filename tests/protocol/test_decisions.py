"""The pass's pure decisions, tested directly and with hypothesis (docs/protocol.md)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadwarden.protocol.decisions import (
    MAX_STALLS,
    AlarmPlan,
    NativeFinish,
    Retry,
    Timing,
    backoff_delay,
    binding_retry_delay,
    current_retry,
    is_caught_up,
    plan_caught_up_alarm,
    plan_failure_alarm,
    plan_failure_retry,
    plan_native_finish,
    rearm_delay,
    select_lane,
)

DEFAULT = Timing()
NOW = 1_700_000_000_000
ALMOST_ONE = math.nextafter(1.0, 0.0)
"""The largest jitter below 1: the backoff's upper bound."""

jitters = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
timings = st.builds(
    Timing,
    alarm_backoff_base=st.integers(min_value=1, max_value=10_000),
    alarm_backoff_cap=st.integers(min_value=1, max_value=100_000),
    wake_scan_interval=st.integers(min_value=1, max_value=10_000),
)


def _finish(
    *,
    generation: int = 5,
    stalls: int = 0,
    dirty: int = 5,
    processed: int = 4,
    autonomous: bool = True,
    progressed: bool = False,
    binding_delay: int = 0,
    deadline: int | None = None,
    jitter: float = 0.0,
) -> NativeFinish:
    """plan_native_finish with a quiet default: one observed generation, nothing raced."""
    return plan_native_finish(
        generation=generation,
        stalls=stalls,
        dirty=dirty,
        processed=processed,
        autonomous=autonomous,
        progressed=progressed,
        binding_delay=binding_delay,
        deadline=deadline,
        now=NOW,
        jitter=jitter,
        timing=DEFAULT,
    )


# --- timing constants -----------------------------------------------------------------------


def test_minimum_alarm_delay_is_half_the_base_rounded_up() -> None:
    assert Timing().minimum_alarm_delay == 50
    assert Timing(alarm_backoff_base=101).minimum_alarm_delay == 51


def test_minimum_alarm_delay_never_drops_below_one_ms() -> None:
    assert Timing(alarm_backoff_base=1).minimum_alarm_delay == 1


# --- backoff --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stalls", "bound"),
    [
        (0, 100),
        (1, 200),
        (2, 400),
        (3, 800),
        (4, 1_600),
        (5, 3_200),
        (6, 5_000),
        (7, 5_000),
        (30, 5_000),
        (31, 5_000),
        (1_000, 5_000),
    ],
)
def test_backoff_delay_spans_half_bound_to_bound_of_the_default_sequence(
    stalls: int, bound: int
) -> None:
    assert backoff_delay(stalls, 0.0, DEFAULT) == math.ceil(bound / 2)
    assert backoff_delay(stalls, 0.5, DEFAULT) == math.ceil(bound * 3 / 4)
    assert backoff_delay(stalls, ALMOST_ONE, DEFAULT) == bound


def test_backoff_delay_rounds_an_odd_bound_up() -> None:
    timing = Timing(alarm_backoff_base=1, alarm_backoff_cap=5_000)
    assert backoff_delay(0, 0.0, timing) == 1
    assert backoff_delay(0, ALMOST_ONE, timing) == 1


def test_backoff_delay_caps_the_exponent_at_thirty_stalls() -> None:
    timing = Timing(alarm_backoff_base=1, alarm_backoff_cap=10**12)
    assert backoff_delay(31, 0.0, timing) == backoff_delay(30, 0.0, timing) == 2**29


@given(stalls=st.integers(min_value=0, max_value=200), jitter=jitters, timing=timings)
def test_backoff_delay_stays_within_half_bound_and_bound(
    stalls: int, jitter: float, timing: Timing
) -> None:
    bound = min(timing.alarm_backoff_cap, timing.alarm_backoff_base * 2 ** min(stalls, 30))
    assert math.ceil(bound / 2) <= backoff_delay(stalls, jitter, timing) <= bound


def test_rearm_delay_after_progress_is_the_base() -> None:
    assert rearm_delay(True, 7, ALMOST_ONE, DEFAULT) == 100


def test_rearm_delay_after_a_stall_backs_off_by_the_stall_count() -> None:
    assert rearm_delay(False, 3, 0.0, DEFAULT) == 400
    assert rearm_delay(False, 3, ALMOST_ONE, DEFAULT) == 800


def test_binding_retry_delay_doubles_from_five_seconds_to_a_sixty_second_cap() -> None:
    delays = [binding_retry_delay(attempts) for attempts in range(1, 7)]
    assert delays == [5_000, 10_000, 20_000, 40_000, 60_000, 60_000]
    assert binding_retry_delay(30) == 60_000


def test_binding_retry_delay_treats_zero_attempts_as_the_first() -> None:
    assert binding_retry_delay(0) == 5_000


# --- retry record and begin's verdict -------------------------------------------------------


def test_current_retry_applies_only_while_its_generation_is_dirty() -> None:
    retry = Retry(generation=3, not_before=NOW, native_only=True, stalls=2)
    assert current_retry(retry, 3) is retry
    assert current_retry(retry, 4) is None
    assert current_retry(None, 3) is None


def test_is_caught_up_when_processed_reaches_dirty() -> None:
    assert is_caught_up(dirty=3, processed=3, retry=None, now=NOW)
    assert not is_caught_up(dirty=1, processed=0, retry=None, now=NOW)


def test_is_caught_up_while_a_current_retry_window_is_open() -> None:
    open_window = Retry(generation=3, not_before=NOW + 1, native_only=True, stalls=1)
    assert is_caught_up(dirty=3, processed=2, retry=open_window, now=NOW)
    due = Retry(generation=3, not_before=NOW, native_only=True, stalls=1)
    assert not is_caught_up(dirty=3, processed=2, retry=due, now=NOW)
    obsolete = Retry(generation=2, not_before=NOW + 10_000, native_only=True, stalls=1)
    assert not is_caught_up(dirty=3, processed=2, retry=obsolete, now=NOW)


# --- selection ------------------------------------------------------------------------------


def test_select_lane_serves_the_first_thread_after_the_cursor() -> None:
    eligible = ["A", "B", "C"]
    picks = []
    last: str | None = None
    for _ in range(4):
        last = select_lane(eligible, last_served=last, blocked_until={}, selection_time=NOW)
        picks.append(last)
    assert picks == ["A", "B", "C", "A"]


def test_select_lane_wraps_when_nothing_follows_a_departed_cursor() -> None:
    assert select_lane(["A", "B"], last_served="Z", blocked_until={}, selection_time=NOW) == "A"
    assert select_lane(["A", "C"], last_served="B", blocked_until={}, selection_time=NOW) == "C"


def test_select_lane_compares_ids_in_byte_order() -> None:
    # "Z" (0x5A) sorts before "a" (0x61) in byte order, whatever the locale would say.
    assert select_lane(["Z", "a"], last_served="Z", blocked_until={}, selection_time=NOW) == "a"


def test_select_lane_skips_threads_whose_binding_retry_is_not_due() -> None:
    blocked = {"B": NOW + 1, "C": NOW}
    assert (
        select_lane(["A", "B", "C"], last_served="A", blocked_until=blocked, selection_time=NOW)
        == "C"
    )


def test_select_lane_returns_none_when_everything_is_blocked_or_nothing_is_eligible() -> None:
    assert select_lane([], last_served=None, blocked_until={}, selection_time=NOW) is None
    assert (
        select_lane(["A"], last_served=None, blocked_until={"A": NOW + 5_000}, selection_time=NOW)
        is None
    )


lane_ids = st.lists(
    st.text(alphabet="ABCabc019_:-.", min_size=1, max_size=6),
    min_size=1,
    max_size=12,
    unique=True,
).map(lambda ids: sorted(ids, key=str.encode))


@given(eligible=lane_ids, start=st.one_of(st.none(), st.text(alphabet="ABCabc019_:-.", max_size=6)))
def test_select_lane_serves_every_eligible_thread_within_one_cycle(
    eligible: list[str], start: str | None
) -> None:
    served = []
    last = start
    for _ in eligible:
        last = select_lane(eligible, last_served=last, blocked_until={}, selection_time=NOW)
        served.append(last)
    assert sorted(served, key=lambda t: (t or "").encode()) == eligible


# --- failure retry and alarm (§3.6) ---------------------------------------------------------


def test_plan_failure_retry_starts_a_fresh_record_for_a_new_generation() -> None:
    obsolete = Retry(generation=2, not_before=NOW + 60_000, native_only=False, stalls=9)
    retry = plan_failure_retry(
        obsolete, generation=3, native_only=True, now=NOW, jitter=0.0, timing=DEFAULT
    )
    assert retry == Retry(generation=3, not_before=NOW + 50, native_only=True, stalls=1)


def test_plan_failure_retry_backs_off_from_the_previous_stalls() -> None:
    previous = Retry(generation=3, not_before=NOW - 1, native_only=True, stalls=2)
    retry = plan_failure_retry(
        previous, generation=3, native_only=False, now=NOW, jitter=ALMOST_ONE, timing=DEFAULT
    )
    assert retry == Retry(generation=3, not_before=NOW + 400, native_only=False, stalls=3)


def test_plan_failure_retry_never_moves_not_before_earlier() -> None:
    previous = Retry(generation=3, not_before=NOW + 10_000, native_only=True, stalls=1)
    retry = plan_failure_retry(
        previous, generation=3, native_only=True, now=NOW, jitter=0.0, timing=DEFAULT
    )
    assert retry.not_before == NOW + 10_000
    assert retry.stalls == 2


def test_plan_failure_retry_holds_stalls_at_thirty() -> None:
    previous = Retry(generation=3, not_before=NOW, native_only=True, stalls=MAX_STALLS)
    retry = plan_failure_retry(
        previous, generation=3, native_only=True, now=NOW, jitter=0.0, timing=DEFAULT
    )
    assert retry.stalls == 30


@given(
    steps=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), jitters), min_size=1, max_size=60
    ),
    timing=timings,
)
def test_plan_failure_retry_keeps_not_before_monotonic_and_stalls_capped(
    steps: list[tuple[int, float]], timing: Timing
) -> None:
    retry: Retry | None = None
    now = NOW
    for count, (advance, jitter) in enumerate(steps, start=1):
        now += advance
        previous = retry
        retry = plan_failure_retry(
            previous, generation=7, native_only=True, now=now, jitter=jitter, timing=timing
        )
        if previous is not None:
            assert retry.not_before >= previous.not_before
        assert retry.not_before > now
        assert retry.stalls == min(MAX_STALLS, count)


def _after_failure(retry: Retry, *, dirty: int = 3, deadline: int | None = None) -> AlarmPlan:
    """plan_failure_alarm at NOW with the default timing (``dirty`` 3: nothing raced the pass
    whose retry is at generation 3)."""
    return plan_failure_alarm(retry, dirty=dirty, deadline=deadline, now=NOW, timing=DEFAULT)


def test_plan_failure_alarm_waits_for_not_before_when_nothing_raced() -> None:
    retry = Retry(generation=3, not_before=NOW + 800, native_only=True, stalls=4)
    assert _after_failure(retry) == AlarmPlan("set", NOW + 800)


def test_plan_failure_alarm_wakes_a_racing_producer_at_the_minimum_delay() -> None:
    retry = Retry(generation=3, not_before=NOW + 5_000, native_only=True, stalls=4)
    assert _after_failure(retry, dirty=4) == AlarmPlan("set", NOW + 50)


def test_plan_failure_alarm_never_sets_sooner_than_the_minimum_delay() -> None:
    retry = Retry(generation=3, not_before=NOW + 10, native_only=True, stalls=0)
    assert _after_failure(retry) == AlarmPlan("set", NOW + 50)


def test_plan_failure_alarm_after_a_native_failure_honours_even_a_due_deadline() -> None:
    retry = Retry(generation=3, not_before=NOW + 5_000, native_only=True, stalls=4)
    assert _after_failure(retry, deadline=NOW - 1_000) == AlarmPlan("set", NOW + 50)
    assert _after_failure(retry, deadline=NOW + 700) == AlarmPlan("set", NOW + 700)


def test_plan_failure_alarm_after_an_auxiliary_failure_ignores_a_due_deadline() -> None:
    retry = Retry(generation=3, not_before=NOW + 5_000, native_only=False, stalls=4)
    assert _after_failure(retry, deadline=NOW) == AlarmPlan("set", NOW + 5_000)
    assert _after_failure(retry, deadline=NOW + 700) == AlarmPlan("set", NOW + 700)


# --- caught-up finish (§3.5d) ---------------------------------------------------------------


def _caught_up(
    *, processed: int = 3, retry: Retry | None = None, deadline: int | None = None
) -> AlarmPlan:
    """plan_caught_up_alarm on a host at generation 4, at NOW, with the default timing."""
    return plan_caught_up_alarm(
        dirty=4, processed=processed, retry=retry, deadline=deadline, now=NOW, timing=DEFAULT
    )


def test_plan_caught_up_alarm_clears_when_nothing_is_owed() -> None:
    assert _caught_up(processed=4) == AlarmPlan("clear")


def test_plan_caught_up_alarm_sets_the_open_retry_window() -> None:
    retry = Retry(generation=4, not_before=NOW + 1_600, native_only=True, stalls=4)
    assert _caught_up(retry=retry) == AlarmPlan("set", NOW + 1_600)


def test_plan_caught_up_alarm_floors_an_expiring_retry_window_at_the_minimum_delay() -> None:
    retry = Retry(generation=4, not_before=NOW + 1, native_only=True, stalls=0)
    assert _caught_up(retry=retry) == AlarmPlan("set", NOW + 50)


def test_plan_caught_up_alarm_falls_back_to_the_wake_scan_without_a_current_retry() -> None:
    obsolete = Retry(generation=3, not_before=NOW + 4_000, native_only=True, stalls=4)
    assert _caught_up(retry=obsolete) == AlarmPlan("set", NOW + 1_000)


def test_plan_caught_up_alarm_takes_the_earlier_of_native_and_deadline() -> None:
    retry = Retry(generation=4, not_before=NOW + 3_000, native_only=True, stalls=4)
    assert _caught_up(retry=retry, deadline=NOW + 700) == AlarmPlan("set", NOW + 700)
    only_deadline = _caught_up(processed=4, deadline=NOW - 5)
    assert only_deadline == AlarmPlan("set", NOW + 50)


# --- native finish (§3.5e 8-9) --------------------------------------------------------------


def test_plan_native_finish_after_progress_rearms_at_the_base_and_drops_the_retry() -> None:
    plan = _finish(progressed=True, stalls=6)
    assert plan == NativeFinish(processed=4, retry=None, alarm=AlarmPlan("set", NOW + 100))


def test_plan_native_finish_after_a_stall_records_a_native_retry() -> None:
    plan = _finish(stalls=3, jitter=ALMOST_ONE)
    assert plan.processed == 4
    assert plan.retry == Retry(generation=5, not_before=NOW + 800, native_only=True, stalls=4)
    assert plan.alarm == AlarmPlan("set", NOW + 800)


def test_plan_native_finish_holds_retry_stalls_at_thirty() -> None:
    plan = _finish(stalls=MAX_STALLS)
    assert plan.retry is not None and plan.retry.stalls == 30


def test_plan_native_finish_wakes_a_racing_producer_at_the_minimum_delay() -> None:
    plan = _finish(dirty=6, stalls=5)
    assert plan.processed == 4
    assert plan.alarm == AlarmPlan("set", NOW + 50)


def test_plan_native_finish_waits_out_a_longer_binding_delay() -> None:
    plan = _finish(progressed=True, binding_delay=5_000)
    assert plan.alarm == AlarmPlan("set", NOW + 5_000)
    assert plan.retry is None


def test_plan_native_finish_lets_an_earlier_deadline_pull_the_autonomous_alarm() -> None:
    assert _finish(progressed=True, binding_delay=5_000, deadline=NOW + 300).alarm == AlarmPlan(
        "set", NOW + 300
    )
    assert _finish(progressed=True, deadline=NOW - 1).alarm == AlarmPlan("set", NOW + 50)


def test_plan_native_finish_acknowledges_only_the_observed_generation() -> None:
    plan = _finish(autonomous=False, generation=5, dirty=6, processed=4)
    assert plan == NativeFinish(processed=5, retry=None, alarm=AlarmPlan("ensure", NOW + 1_000))


def test_plan_native_finish_never_lowers_processed() -> None:
    plan = _finish(autonomous=False, generation=5, dirty=7, processed=6)
    assert plan.processed == 6


def test_plan_native_finish_caps_the_overlap_alarm_by_a_deadline() -> None:
    plan = _finish(autonomous=False, generation=5, dirty=6, deadline=NOW + 200)
    assert plan.alarm == AlarmPlan("ensure", NOW + 200)


def test_plan_native_finish_sets_the_deadline_once_acknowledged() -> None:
    plan = _finish(autonomous=False, deadline=NOW + 10)
    assert plan == NativeFinish(processed=5, retry=None, alarm=AlarmPlan("set", NOW + 50))


def test_plan_native_finish_clears_the_alarm_once_acknowledged_with_nothing_pending() -> None:
    plan = _finish(autonomous=False, stalls=4)
    assert plan == NativeFinish(processed=5, retry=None, alarm=AlarmPlan("clear"))


def test_plan_caught_up_alarm_never_postpones_a_mutation_that_raced_the_pass() -> None:
    plan = plan_caught_up_alarm(
        dirty=8, processed=7, retry=None, deadline=None, now=NOW, timing=Timing(), generation=7
    )
    assert plan == AlarmPlan("set", NOW + 50)
