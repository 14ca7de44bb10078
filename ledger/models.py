"""Typed rows the repositories return among themselves, and their column codecs.

What a caller gets back (receipts, operator results, status views) is public: `threadwarden.views`.
"""

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from threadwarden.protocol.decisions import BindingRetry, Retry
from threadwarden.views import FinalOutcome, Receipt

STABLE_WAITS: frozenset[str] = frozenset({"suspended", "unknown"})
"""Head states only an external mutation can advance: the pass may let the alarm go quiet."""


def to_ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime."""
    return int(instant.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


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


class CallJoined(BaseModel):
    """The body of a parent's ``call-joined`` record: its child's canonical settlement, as the
    call that delegated to it joins it (the binding sees it as `threadwarden.ChildOutcome`)."""

    submission_id: str
    thread_id: str
    outcome: FinalOutcome
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
