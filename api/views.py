"""What the ledger shows a caller: what an admission or an operator decision did, and how a
submission, a thread or a host stands now.

`ThreadwardenClient` (and the CLI and the console through it) return these models; the ledger
builds them. They are pydantic models, so they serialise as the CLI's and the console's JSON.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

SubmissionState = Literal[
    "admitted",
    "ready",
    "running",
    "input-applied",
    "terminalizing",
    "settled",
    "suspended",
    "unknown",
]
FinalOutcome = Literal["completed", "failed", "aborted"]
"""How a submission settled (the binding's `threadwarden.Outcome` is what its handler returns)."""
WaitingFor = Literal["approval", "input", "unknown-resolution", "binding", "child"]


class Receipt(BaseModel):
    """What admission returns; the same key and payload always return the same receipt."""

    submission_id: str
    thread_id: str
    host_id: str
    sequence: int
    created: bool
    interrupted: list[str] = Field(default_factory=list)
    """Submissions of the thread this one asked to abort (``if_busy="interrupt"``), in queue
    order: a waiting or queued one settled ``aborted`` at once, a running one stops at its next
    committed boundary."""
    warnings: list[str] = Field(default_factory=list)
    """What the caller should know but was not refused for: e.g. that no worker serves the
    agent yet (the submission waits until one does)."""
    wake: bool = Field(default=True, exclude=True)
    """Whether the host needs a wake: False when an alarm at least as early was already armed
    (a pass is running or due and will see this admission) or nothing was created. Not part
    of the receipt's serialised form."""
    parent_hosts: list[str] = Field(default_factory=list, exclude=True)
    """Hosts of parents whose child an interrupt settled: the caller wakes them too."""


class OperatorResult(BaseModel):
    """What an operator action did."""

    submission_id: str
    thread_id: str
    host_id: str
    state: str
    outcome: str | None = None
    changed: bool = True
    parent_host_id: str | None = Field(default=None, exclude=True)
    """The host of the parent this action made dirty by settling its child: the caller wakes
    it too (not part of the action's printed shape)."""


class SubmissionView(BaseModel):
    """One submission as its thread's status lists it."""

    submission_id: str
    sequence: int
    state: SubmissionState
    outcome: FinalOutcome | None
    agent_id: str
    attempts: int
    epoch: int
    reason: str | None
    waiting_for: WaitingFor | None = None
    """What the submission waits for: a person's approval, an operator's decision on an
    unknown side effect, a compatible binding, or its subagent children (``child``)."""
    source_thread_id: str | None = None
    """Set when the submission was accepted from another thread's message."""
    source_message_id: str | None = None
    created_at: datetime | None = None
    """When it was admitted (None only on a view built without it)."""
    settled_at: datetime | None = None
    """When its outcome was finalized; None until settled."""
    parent_submission_id: str | None = None
    """Set on a child submission: the submission whose tool call delegated to it."""
    parent_thread_id: str | None = None
    """The parent submission's thread (set with ``parent_submission_id``)."""
    children: list[str] | None = None
    """Set while ``waiting_for`` is ``child``: the child submissions the parent still waits
    for (those its wait lists that have not settled yet), in the order it listed them."""


class SubmissionDetail(SubmissionView):
    """One submission on its own (`ThreadwardenClient.submission`): its view, where it lives,
    and once settled what its binding returned."""

    thread_id: str
    host_id: str
    input: Any = None
    """What was submitted (the admission's ``input``)."""
    result: Any = None
    """What the binding returned (``completed``); None until then."""
    interrupted_by: str | None = None
    """The submission admitted with ``if_busy="interrupt"`` that asked this one to abort."""


class TurnView(BaseModel):
    """One turn of a thread's conversation (`ThreadwardenClient.turns`): what was submitted,
    where it stands and what came of it, as a chat page shows it. ``state``, ``outcome``,
    ``waiting_for``, ``reason`` and ``result`` are those of `SubmissionDetail`."""

    submission_id: str
    sequence: int
    agent: str
    """The agent id of the binding that runs it."""
    input: Any
    """What was submitted: the user's message."""
    state: SubmissionState
    outcome: FinalOutcome | None
    result: Any = None
    """What the binding returned (``completed``); None until then."""
    waiting_for: WaitingFor | None = None
    reason: str | None = None
    """Why it failed or was aborted, or why it waits for a binding."""
    created_at: datetime
    settled_at: datetime | None = None


class TurnPage(BaseModel):
    """A page of a thread's turns, newest first; ``next_before`` is the ``before`` of the next
    (older) page, None when no turn is older."""

    turns: list[TurnView]
    next_before: int | None
    last_record: int
    """The thread's latest record sequence when the page was read (0: none yet), in the same
    snapshot as its turns: follow the thread's records after it (``events?after=``) and none
    is missed or seen twice."""


class ThreadStatus(BaseModel):
    """A thread, its host and its submissions in queue order."""

    thread_id: str
    host_id: str
    submissions: list[SubmissionView]


class RetryView(BaseModel):
    """The host's pending pass retry (a failed pass's backoff)."""

    generation: int
    not_before: datetime
    native_only: bool
    stalls: int


class BindingRetryView(BaseModel):
    """A submission waiting to retry for want of a compatible binding."""

    thread_id: str
    submission_id: str
    attempts: int
    not_before: datetime
    reported_at: datetime


class AuxiliaryDueView(BaseModel):
    """When the host's auxiliary work is next due (each joins the alarm)."""

    publication: datetime | None
    """The next publication retry (an unpublished record)."""
    message: datetime | None
    """The next message delivery (a claimed message: its claim deadline)."""
    projection: datetime | None
    """The projection backfill."""
    host_work: datetime | None = None
    """Host work marked for the host plug-in (`ThreadwardenClient.host_work_due`)."""


class HostStatus(BaseModel):
    """A host's row: its generations, alarm, retries and last pass."""

    host_id: str
    dirty: int
    processed: int
    nonterminal: int
    alarm_at: datetime | None
    last_served_thread_id: str | None
    retry: RetryView | None
    binding_retries: list[BindingRetryView]
    pass_epoch: int
    last_outcome: str | None
    last_error: str | None
    auxiliary_due: AuxiliaryDueView | None = None
    updated_at: datetime | None = None
    """When the host row last changed (a mutation, a pass step)."""
