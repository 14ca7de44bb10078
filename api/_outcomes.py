"""What a binding's handler and its attempt context's calls return (`threadwarden.bindings`
names them all): a turn's outcome, a child's settlement, a person's approval, a saved
checkpoint."""

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Completed:
    """The submission finished its work; ``result`` becomes part of the settlement record."""

    result: Any = None


@dataclass(frozen=True)
class Failed:
    """The submission cannot finish; ``reason`` is recorded with the settlement."""

    reason: str


@dataclass(frozen=True)
class Yielded:
    """Stop here without settling; a later pass resumes, replaying the committed steps."""


Outcome = Completed | Failed | Yielded


@dataclass(frozen=True)
class ChildOutcome:
    """What a delegation (`AttemptContext.call_agent`) returns: the child's canonical settlement.

    A child that failed or was aborted comes back as such (the call does not raise): the
    parent decides what to make of it.
    """

    submission_id: str
    thread_id: str
    outcome: Literal["completed", "failed", "aborted"]
    result: Any = None
    reason: str | None = None
    budget_consumed: int | None = None
    """What the child spent of the budget the call reserved (None: the call reserved none)."""


@dataclass(frozen=True)
class ApprovalDecision:
    """What `AttemptContext.request_approval` returns once a person decided.

    ``approved`` False comes back only for a request made with ``on_deny="resume"``; ``reason``
    is the operator's (``deny --reason``), ``operator`` who decided, when known.
    """

    approved: bool
    reason: str | None = None
    operator: str | None = None


@dataclass(frozen=True)
class SavedCheckpoint:
    """State a binding saved to resume from (`AttemptContext.save_checkpoint`), read back."""

    submission_id: str
    """The submission that saved it (another one's: the thread's carried state)."""
    step: int
    """The journal position when it was saved (the steps the submission had taken)."""
    meta: Any
    """The binding's JSON description of it."""
    data: bytes
    """The binding's opaque payload."""
    carry: bool
    """Whether it may seed the thread's next submission."""
