"""Which agents' heads a worker runs inline because their attempts have been quick on it.

A binding declared ``inline`` always runs its heads on the pass's worker (within the inline
budget). Any other binding is dispatched to its agent's queue: a model request may take
minutes. But when an agent answers in tens of milliseconds (a small or local model, a cached
answer, a tool-only turn), the dispatch costs more than the turn: an activity round trip through
the Temporal server and seven history events. So each worker watches the attempts it runs: an
agent whose last `WINDOW` attempts here each ended by themselves within the inline budget, none
of their steps (a model request, a tool) longer than ``quick_ms``, has its next heads run
inline, exactly as an inline binding's (the budget, the hand-over at a committed boundary, the
hard bound). One slow attempt, dispatched or inline, sends its heads back to the queue until
`WINDOW` quick ones again. A new digest (a deploy) starts over; so does a worker's restart.

The longest step decides, not the attempt's length alone: a step in flight is never cut by the
budget, so a step is what could hold a local-activity slot; an attempt's length grows with the
worker's load too (many attempts sharing one interpreter), a step's much less.
"""

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

WINDOW = 8
"""How many of an agent's latest attempts on this worker must each have been quick."""


@dataclass(eq=False)
class StepTiming:
    """How long an attempt has run and how long its longest step (a tool or model call) took."""

    started: float = field(default_factory=time.monotonic)
    longest_step_ms: float = 0.0

    @property
    def elapsed_ms(self) -> float:
        return 1000 * (time.monotonic() - self.started)

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time one step's run."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.longest_step_ms = max(self.longest_step_ms, 1000 * (time.monotonic() - began))


@dataclass(eq=False)
class QuickHeads:
    """One per worker: the latest attempts' quickness per agent and digest."""

    quick_ms: int
    """The longest step of a quick attempt (``Settings.inline_quick_ms``); 0: none is quick."""
    budget_ms: int
    """The longest a quick attempt runs (``Settings.inline_budget_ms``)."""
    _latest: dict[tuple[str, str], deque[bool]] = field(default_factory=dict)

    def note(self, agent_id: str, digest: str, timing: StepTiming, *, ended: bool) -> None:
        """One attempt of ``agent_id`` at ``digest`` ran its binding: ``ended`` when the binding
        returned, raised, waited or was aborted by itself (not a yield to a budget or a
        deadline, not a fault)."""
        if self.quick_ms <= 0:
            return
        quick = (
            ended
            and timing.longest_step_ms <= self.quick_ms
            and timing.elapsed_ms <= self.budget_ms
        )
        self._latest.setdefault((agent_id, digest), deque(maxlen=WINDOW)).append(quick)

    def quick(self, agent_id: str, digest: str) -> bool:
        """Whether the agent's latest `WINDOW` attempts here were all quick."""
        latest = self._latest.get((agent_id, digest))
        return latest is not None and len(latest) == WINDOW and all(latest)
