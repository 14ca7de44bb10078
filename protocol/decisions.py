"""Pure decisions of the maintenance pass: backoff, selection and alarm arithmetic.

All times are integer epoch milliseconds and all inputs are explicit, so these functions are
deterministic and are tested directly (and with hypothesis). Nothing here does I/O.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

MAX_STALLS = 30
MAX_BINDING_ATTEMPTS = 30
BINDING_RETRY_BASE_MS = 5_000
BINDING_RETRY_CAP_MS = 60_000
BINDING_REPORT_INTERVAL_MS = 900_000


@dataclass(frozen=True)
class Timing:
    """The pass's tunable delays, in milliseconds."""

    alarm_backoff_base: int = 100
    alarm_backoff_cap: int = 5_000
    wake_scan_interval: int = 1_000

    @property
    def minimum_alarm_delay(self) -> int:
        """The floor under every alarm: never sooner than this after now."""
        return max(1, math.ceil(self.alarm_backoff_base / 2))


@dataclass(frozen=True)
class Retry:
    """The durable maintenance backoff record; it applies while ``generation == dirty``."""

    generation: int
    not_before: int
    native_only: bool
    stalls: int
    epoch: int = 0
    """The pass that recorded it (a pass's rearm counts once, however often it runs)."""


@dataclass(frozen=True)
class AlarmPlan:
    """What a pass does to the host's alarm: ``set`` overwrites, ``ensure`` keeps an earlier one."""

    action: Literal["set", "ensure", "clear"]
    at: int | None = None


def backoff_delay(stalls: int, jitter: float, timing: Timing) -> int:
    """ceil(b/2 + b/2·jitter) with b = min(cap, base·2^min(stalls, 30)); jitter in [0, 1)."""
    bound = min(
        timing.alarm_backoff_cap, timing.alarm_backoff_base * (1 << min(stalls, MAX_STALLS))
    )
    return math.ceil(bound / 2 + bound / 2 * jitter)


def rearm_delay(progressed: bool, stalls: int, jitter: float, timing: Timing) -> int:
    """Progress rearms at the base delay; a stall backs off by the persisted stall count."""
    return timing.alarm_backoff_base if progressed else backoff_delay(stalls, jitter, timing)


def binding_retry_delay(attempts: int) -> int:
    """min(60 s, 5 s·2^(attempts−1)): 5, 10, 20, 40, then 60 seconds."""
    return min(BINDING_RETRY_CAP_MS, BINDING_RETRY_BASE_MS * (1 << (max(attempts, 1) - 1)))


@dataclass(frozen=True)
class BindingRetry:
    """A head's durable binding backoff: selection skips its thread until ``not_before``."""

    thread_id: str
    submission_id: str
    attempts: int
    not_before: int
    reported_at: int
    epoch: int = 0
    """The pass that recorded the last failure (it counts once in that pass)."""


def plan_binding_retry(
    previous: BindingRetry | None, *, thread_id: str, submission_id: str, failed: bool, now: int
) -> tuple[BindingRetry | None, bool]:
    """The entry after an attempt on this head, and whether to log at error level.

    A failure counts attempts (capped at 30) and backs off min(60 s, 5 s·2^(attempts−1)); it is
    reported when there was no entry or the last report is 15 minutes old. Success removes it.
    """
    if not failed:
        return None, False
    attempts = min(MAX_BINDING_ATTEMPTS, (previous.attempts if previous else 0) + 1)
    report = previous is None or now - previous.reported_at >= BINDING_REPORT_INTERVAL_MS
    reported_at = now if report or previous is None else previous.reported_at
    entry = BindingRetry(
        thread_id, submission_id, attempts, now + binding_retry_delay(attempts), reported_at
    )
    return entry, report


def binding_delay(next_eligible: Iterable[int], now: int) -> int:
    """How long until the earliest lane eligible before the attempt may run again, given the
    binding backoff of its head; 0 when no lane was eligible (docs/protocol.md, "The pass,
    step by step", (e)7–9)."""
    earliest = min(next_eligible, default=None)
    return 0 if earliest is None else max(0, earliest - now)


def current_retry(retry: Retry | None, dirty: int) -> Retry | None:
    """The retry record if it still applies: a newer mutation makes it obsolete."""
    return retry if retry is not None and retry.generation == dirty else None


def is_caught_up(*, dirty: int, processed: int, retry: Retry | None, now: int) -> bool:
    """Begin's verdict: nothing new, or a durable backoff window is still open."""
    live = current_retry(retry, dirty)
    return processed >= dirty or (live is not None and live.not_before > now)


def select_lane(
    eligible: Iterable[str],
    *,
    last_served: str | None,
    blocked_until: Mapping[str, int],
    selection_time: int,
) -> str | None:
    """Round-robin: the first runnable thread after ``last_served``, else the first runnable.

    ``eligible`` must be sorted in byte order (Postgres ``COLLATE "C"``); threads whose binding
    retry is not yet due are skipped.
    """
    runnable = [t for t in eligible if blocked_until.get(t, 0) <= selection_time]
    if not runnable:
        return None
    if last_served is not None:
        for thread_id in runnable:
            if thread_id.encode() > last_served.encode():
                return thread_id
    return runnable[0]


def plan_failure_retry(
    previous: Retry | None,
    *,
    generation: int,
    native_only: bool,
    now: int,
    jitter: float,
    timing: Timing,
) -> Retry:
    """The retry a failed pass records: notBefore never decreases, stalls count up to 30."""
    prior = previous if previous is not None and previous.generation == generation else None
    stalls = prior.stalls if prior is not None else 0
    not_before = max(prior.not_before if prior else 0, now + backoff_delay(stalls, jitter, timing))
    return Retry(generation, not_before, native_only, min(MAX_STALLS, stalls + 1))


def plan_failure_alarm(
    retry: Retry, *, dirty: int, deadline: int | None, now: int, timing: Timing
) -> AlarmPlan:
    """After a failure: a racing commit is never postponed; aux deadlines join by nativeOnly."""
    floor = now + timing.minimum_alarm_delay
    native = floor if dirty != retry.generation else retry.not_before
    if deadline is not None and (retry.native_only or deadline > now):
        return AlarmPlan("set", max(floor, min(native, deadline)))
    return AlarmPlan("set", max(floor, native))


def plan_caught_up_alarm(
    *,
    dirty: int,
    processed: int,
    retry: Retry | None,
    deadline: int | None,
    now: int,
    timing: Timing,
    generation: int | None = None,
) -> AlarmPlan:
    """The caught-up (or publication-blocked) finish: set to the earliest need, else clear.

    ``generation`` is what begin observed: a mutation that committed since (``dirty`` moved) is
    never postponed, its alarm stays at the minimum delay (docs/protocol.md, "Decisions where the
    sources were ambiguous").
    """
    floor = now + timing.minimum_alarm_delay
    native: int | None = None
    if generation is not None and dirty != generation:
        native = floor
    elif dirty > processed:
        live = current_retry(retry, dirty)
        native = max(floor, live.not_before) if live else now + timing.wake_scan_interval
    candidates = [t for t in (native, deadline) if t is not None]
    if not candidates:
        return AlarmPlan("clear")
    return AlarmPlan("set", max(floor, min(candidates)))


@dataclass(frozen=True)
class NativeFinish:
    """The acknowledgement, retry record and alarm decided at the end of an actionable pass."""

    processed: int
    retry: Retry | None
    alarm: AlarmPlan


def plan_native_finish(
    *,
    generation: int,
    stalls: int,
    dirty: int,
    processed: int,
    autonomous: bool,
    progressed: bool,
    binding_delay: int,
    deadline: int | None,
    now: int,
    jitter: float,
    timing: Timing,
) -> NativeFinish:
    """Brief §3.5(e)8-9: acknowledge only the observed generation, keep autonomous work armed."""
    floor = now + timing.minimum_alarm_delay
    ordinary = rearm_delay(progressed, stalls, jitter, timing) if autonomous else 0
    delay = max(ordinary, binding_delay)
    acknowledged = processed if autonomous else max(processed, generation)
    retry = None
    if autonomous and not progressed:
        retry = Retry(generation, now + delay, True, min(MAX_STALLS, stalls + 1))
    if autonomous:
        native = floor if dirty != generation else now + delay
        at = max(floor, min(native, deadline)) if deadline is not None else native
        return NativeFinish(acknowledged, retry, AlarmPlan("set", at))
    if dirty > acknowledged:
        at = now + timing.wake_scan_interval
        if deadline is not None:
            at = max(floor, min(at, deadline))
        return NativeFinish(acknowledged, retry, AlarmPlan("ensure", at))
    if deadline is not None:
        return NativeFinish(acknowledged, retry, AlarmPlan("set", max(floor, deadline)))
    return NativeFinish(acknowledged, retry, AlarmPlan("clear"))
