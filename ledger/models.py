"""Typed rows the repositories return."""

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from threadwarden.protocol.decisions import BindingRetry, Retry

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
Outcome = Literal["completed", "failed", "aborted"]
STABLE_WAITS: frozenset[str] = frozenset({"suspended", "unknown"})
"""Head states only an external mutation can advance: the pass may let the alarm go quiet."""


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    return int(instant.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


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


WaitingFor = Literal["approval", "input", "unknown-resolution", "binding", "child"]


class SubmissionView(BaseModel):
    submission_id: str
    sequence: int
    state: SubmissionState
    outcome: Outcome | None
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
    """One submission on its own (`threadwarden.ledger.status.StatusReader.submission`): its
    view, where it lives, and once settled what its binding returned."""

    thread_id: str
    host_id: str
    result: Any = None
    """What the binding returned (``completed``); None until then."""
    interrupted_by: str | None = None
    """The submission admitted with ``if_busy="interrupt"`` that asked this one to abort."""


class ThreadStatus(BaseModel):
    thread_id: str
    host_id: str
    submissions: list[SubmissionView]


class RetryView(BaseModel):
    generation: int
    not_before: datetime
    native_only: bool
    stalls: int


class BindingRetryView(BaseModel):
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


def retry_from_json(value: dict[str, Any] | None) -> Retry | None:
    """Decode the ``hosts.retry`` column."""
    if value is None:
        return None
    return Retry(
        generation=int(value["generation"]),
        not_before=int(value["not_before"]),
        native_only=bool(value["native_only"]),
        stalls=int(value["stalls"]),
        epoch=int(value.get("epoch", 0)),
    )


def retry_to_json(retry: Retry | None) -> dict[str, Any] | None:
    """Encode a retry for the ``hosts.retry`` column (instants as epoch ms)."""
    if retry is None:
        return None
    encoded = {
        "generation": retry.generation,
        "not_before": retry.not_before,
        "native_only": retry.native_only,
        "stalls": retry.stalls,
    }
    if retry.epoch:  # recorded by a failure rearm: the pass that recorded it
        encoded["epoch"] = retry.epoch
    return encoded


def binding_retries_from_json(value: list[dict[str, Any]]) -> list[BindingRetry]:
    """Decode the ``hosts.binding_retries`` column."""
    return [
        BindingRetry(
            thread_id=str(v["thread_id"]),
            submission_id=str(v["submission_id"]),
            attempts=int(v["attempts"]),
            not_before=int(v["not_before"]),
            reported_at=int(v["reported_at"]),
            epoch=int(v.get("epoch", 0)),
        )
        for v in value
    ]


def binding_retries_to_json(entries: list[BindingRetry]) -> list[dict[str, Any]]:
    """Encode binding retries for the ``hosts.binding_retries`` column (instants as epoch ms)."""
    return [
        {
            "thread_id": e.thread_id,
            "submission_id": e.submission_id,
            "attempts": e.attempts,
            "not_before": e.not_before,
            "reported_at": e.reported_at,
            "epoch": e.epoch,
        }
        for e in entries
    ]


class ChildReceipt(Receipt):
    """What establishing a child returns: the child's receipt and its parent linkage."""

    parent_submission_id: str
    parent_call_step: int
    idempotency_key: str


class BudgetAccount(BaseModel):
    """A delegation budget, settled once at the join: what the call reserved for its child,
    what the child spent (its ``budget-spent`` records) and what returns to the caller."""

    reserved: int
    consumed: int
    released: int


class ChildOutcome(BaseModel):
    """A joined child's canonical settlement, as the parent's tool call records it."""

    submission_id: str
    thread_id: str
    outcome: Outcome
    result: Any = None
    reason: str | None = None
    settlement_record_id: str
    budget: BudgetAccount | None = None
    """The call's budget account, when it reserved one."""


ChildSettledStatus = Literal["woken", "still-waiting", "not-waiting"]


class ChildSettled(BaseModel):
    """What recording a child's settlement on its parent did."""

    status: ChildSettledStatus
    """``woken``: every child the parent waits for has settled, it is ``input-applied``;
    ``still-waiting``: it waits for others; ``not-waiting``: it does not wait for this child
    (a replay, or it has not suspended yet: its suspend will see the marker)."""
    parent_submission_id: str
    parent_host_id: str
    recorded: bool
    """Whether this call wrote the marker (False: a replay, nothing written, no wake needed)."""


class UnjoinedChild(BaseModel):
    """A child its parent has not joined yet."""

    step: int
    """The parent's call step."""
    submission_id: str
    settled: bool


class ChildWait(BaseModel):
    """What a parent's suspend on its children did."""

    suspended: bool
    """False: every listed child had already settled (resume at once, under the same claim)."""
    settled: list[str]
    """The listed children with a settled marker."""
    waiting: list[str]
    """The listed children it waits for (empty when not suspended)."""
