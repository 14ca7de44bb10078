"""One attempt's journal: its numbered steps, the records earlier attempts committed (replayed
instead of done again), and its fenced writes.

Errors decide nothing by accident (docs/bindings.md, "Errors"): a failure of threadwarden's own
write is remembered as the attempt's `Journal.fault`, so it fails the pass (and is retried) even
when the handler catches it and returns `Failed`; once faulted, the journal refuses further
steps.

An inline attempt (`activities/attempt.py`) also keeps to its budget here: past it the attempt
yields at its next committed step, and before a step declared to take longer than the budget has
left (`Journal.make_room`) it yields at the boundary before it, so the step runs once, dispatched.
The budget never cuts a step in flight; one that runs well past it is named in a warning.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from threadwarden.activities.endings import AttemptFaulted, NonDeterministic, Yield
from threadwarden.activities.quick_heads import StepTiming
from threadwarden.bindings import ThreadRecord
from threadwarden.errors import InvalidInput
from threadwarden.failpoints import Failpoints
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.claims import Claim

T = TypeVar("T")

logger = logging.getLogger(__name__)

OVERRUN_WARNING_MS = 1_000
"""How far past its inline budget a step may end before the attempt warns that it should have
declared its length (`Journal.make_room`)."""

RESERVED_KINDS = frozenset(
    {
        "settlement",
        "tool-call",
        "tool-result",
        "tool-resolution",
        "approval-requested",
        "approval-decision",
        "input-requested",
        "input-answer",
        "message-sent",
        "call-started",
        "call-joined",
        "children-awaited",
        "lineage",
        "budget-spent",
    }
)
"""Record kinds only threadwarden writes (through ``tool``, ``request_approval``, ``ask``)."""


def check_count(field: str, value: Any) -> None:
    """Raise `InvalidInput` naming ``field`` unless ``value`` is a non-negative integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(field, "a non-negative integer", value)


@dataclass(eq=False, repr=False)
class Journal:
    """The steps of one attempt: which are committed, the next one, and the writes that commit
    them (each after its failpoint, its failure remembered as the attempt's ``fault``)."""

    claim: Claim
    attempts: Attempts
    yield_after: datetime
    failpoints: Failpoints = field(default_factory=Failpoints)
    inline_until: datetime | None = None
    """The end of an inline attempt's budget (None: a dispatched attempt)."""
    quick: bool = False
    """Inline for its agent's quickness on this worker (`QuickHeads`), not declared inline."""
    fault: BaseException | None = field(default=None, init=False)
    """The first failure of one of threadwarden's own writes (never a validation of the
    binding's arguments). It decides the attempt whatever the handler made of it."""
    step: int = field(default=0, init=False)
    """The last step taken."""
    timing: StepTiming = field(default_factory=StepTiming, init=False)
    """How long the attempt and its longest step ran (`QuickHeads`)."""

    def __post_init__(self) -> None:
        self._records = {(r.step, r.kind): r for r in self.claim.journal}
        self._last_committed = max((r.step or 0 for r in self.claim.journal), default=0)

    @property
    def replaying(self) -> bool:
        return self.step < self._last_committed

    def record(self, step: int, kind: str) -> ThreadRecord | None:
        """The committed record of ``kind`` at ``step``, if any."""
        return self._records.get((step, kind))

    def has(self, step: int, kind: str) -> bool:
        """Whether a record of ``kind`` at ``step`` is committed."""
        return (step, kind) in self._records

    def kind_bodies(self, kind: str) -> list[Any]:
        """The bodies of every committed record of ``kind``."""
        return [r.body for (_, k), r in self._records.items() if k == kind]

    def commit(self, step: int, record: ThreadRecord | None = None) -> None:
        """``step`` committed (``record``: replayed when the step is asked for again)."""
        if record is not None:
            self._records[(step, record.kind)] = record
        self._last_committed = max(self._last_committed, step)

    def next(self) -> int:
        """Take the next step (refused once the attempt faulted)."""
        self.check_fault()
        self.step += 1
        return self.step

    def check_fault(self) -> None:
        if self.fault is not None:
            # A step after a failed one would leave a gap in the journal that the re-run
            # could never replay.
            raise AttemptFaulted(
                f"attempt {self.claim.attempt_id}: an earlier step failed"
                f" ({type(self.fault).__name__}: {self.fault}); no further step can run"
            ) from self.fault

    def expect_new(self, step: int, kind: str) -> None:
        """Raise `NonDeterministic` unless ``step`` is past every committed one."""
        if step <= self._last_committed:
            kinds = sorted(k for s, k in self._records if s == step)
            raise NonDeterministic(f"step {step}", f"one of the committed {kinds}", kind)

    def uncommitted_call(self, step: int) -> bool:
        """Whether ``step`` is a call that never committed while later calls did: calls awaited
        together are established concurrently, so a fault in one (its database write cut off)
        can leave its step empty behind committed ones. The re-run establishes it then; any
        other gap in the journal is nondeterminism."""
        if step > self._last_committed or any(s == step for s, _ in self._records):
            return False
        later = {kind for s, kind in self._records if s is not None and s > step}
        return later <= {"call-started", "call-joined"}

    async def guarded(
        self, failpoint: str | None, write: Callable[[], Awaitable[T]], *, after: bool = False
    ) -> T:
        """Run one of threadwarden's writes (after its failpoint; ``after``: also once it
        committed, at ``{failpoint}:after``); remember how it failed."""
        try:
            if failpoint is not None:
                await self.failpoints.hit(failpoint)
            written = await write()
            if after and failpoint is not None:
                await self.failpoints.hit(f"{failpoint}:after")
            return written
        except InvalidInput:  # a value the binding passed: its own, deterministic mistake
            raise
        except (Exception, asyncio.CancelledError) as error:
            # A cancelled write (the handler's own timeout around it) may or may not have
            # committed: a fault too, so the handler cannot go on past it.
            if self.fault is None:
                self.fault = error
            raise

    async def write(
        self,
        kind: str,
        body: Any,
        step: int,
        *,
        failpoint: str | None = None,
        check_yield: bool = True,
        honour_abort: bool = True,
    ) -> ThreadRecord:
        """Append a record of ``kind`` at ``step``; past ``yield_after`` (when
        ``check_yield``), stop the attempt at this committed boundary."""
        record = await self.guarded(
            failpoint,
            lambda: self.attempts.append(
                self.claim, kind, body, step=step, honour_abort=honour_abort
            ),
        )
        self.commit(step, record)
        if check_yield and datetime.now(UTC) >= self.yield_after:
            self.check_overrun(f"step {step} ({_named(kind, body)})")
            raise Yield(f"yield_after {self.yield_after.isoformat()} passed at step {step}")
        return record

    def make_room(self, expected_ms: int, what: str) -> None:
        """Before ``what``, a step expected to take ``expected_ms``: an inline attempt it would
        carry past its budget yields here, at the committed boundary before it (nothing of the
        step started), so the dispatched attempt runs it once."""
        check_count("expected_ms", expected_ms)
        if self.inline_until is None:
            return
        if datetime.now(UTC) + timedelta(milliseconds=expected_ms) > self.inline_until:
            raise Yield(f"{what}, expected to take {expected_ms} ms, would outlive the budget")

    def check_overrun(self, what: str) -> None:
        """Warn when an inline attempt's ``what`` (the step it just ended) ran more than
        `OVERRUN_WARNING_MS` past the budget: it held a local-activity slot that long, and
        its binding should declare such a step (or not be inline). A head inline for its
        agent's quickness (``quick``) is only noted: its agent's next heads are dispatched."""
        if self.inline_until is None:
            return
        over = (datetime.now(UTC) - self.inline_until) / timedelta(milliseconds=1)
        if over <= OVERRUN_WARNING_MS:
            return
        advice = (
            "the agent's heads are dispatched until its attempts are quick again"
            if self.quick  # not declared inline: nothing for its author to declare
            else "declare how long such a step takes (expected_ms of AttemptContext.tool, or"
            " AttemptContext.before_long_step) so that it runs dispatched, or do not mark the"
            " binding inline"
        )
        (logger.info if self.quick else logger.warning)(
            "%s of agent %s ran %d ms past its inline budget on %s: %s",
            what,
            self.claim.agent_id,
            over,
            self.claim.submission_id,
            advice,
        )


def _named(kind: str, body: Any) -> str:
    """A step's record as a warning names it: its kind, and a tool's name."""
    if isinstance(body, dict) and isinstance(body.get("tool"), str):
        return f"{kind} of tool {body['tool']!r}"
    return kind
