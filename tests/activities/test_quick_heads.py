"""`QuickHeads` alone: what makes an agent's attempts quick on a worker (the route it gives is
tested end to end in tests/e2e/test_quick_heads.py)."""

from __future__ import annotations

from threadwarden.activities.quick_heads import WINDOW, QuickHeads, StepTiming


def _noted(
    heads: QuickHeads, *, step_ms: float = 0, ended: bool = True, digest: str = "v1"
) -> None:
    timing = StepTiming()
    timing.longest_step_ms = step_ms
    heads.note("agent", digest, timing, ended=ended)


def test_quick_after_a_window_of_quick_attempts_only() -> None:
    heads = QuickHeads(quick_ms=100, budget_ms=2_000)
    for _ in range(WINDOW - 1):
        _noted(heads)
    assert not heads.quick("agent", "v1")
    _noted(heads)
    assert heads.quick("agent", "v1")
    assert not heads.quick("agent", "v2")  # another digest (a deploy) starts over


def test_a_slow_step_or_an_attempt_that_did_not_end_by_itself_is_not_quick() -> None:
    heads = QuickHeads(quick_ms=100, budget_ms=2_000)
    for slow in ({"step_ms": 101}, {"ended": False}):
        for _ in range(WINDOW):
            _noted(heads)
        _noted(heads, **slow)
        assert not heads.quick("agent", "v1")


def test_an_attempt_longer_than_the_budget_is_not_quick() -> None:
    heads = QuickHeads(quick_ms=100, budget_ms=0)  # any attempt takes longer than 0 ms
    for _ in range(WINDOW):
        _noted(heads)
    assert not heads.quick("agent", "v1")


def test_inline_quick_ms_0_makes_no_agent_quick() -> None:
    heads = QuickHeads(quick_ms=0, budget_ms=2_000)
    for _ in range(WINDOW):
        _noted(heads)
    assert not heads.quick("agent", "v1")
