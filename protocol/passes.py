"""What the ledger's pass steps return and the host workflow reads: defined once, here, so the
ledger (which must not import the workflows) and the workflows (which must not import the
ledger) share one type each, with no conversion between them."""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

PassOutcome = Literal["caught-up", "actionable", "failed"]


class Selection(BaseModel):
    """Round-robin selection over a host's lane heads (docs/protocol.md, "The pass, step by
    step", (e)2–3)."""

    thread_id: str | None
    """The selected lane (None: nothing is runnable)."""
    submission_id: str | None = None
    """The selected thread's head: the one submission this pass may claim."""
    agent_id: str | None = None
    """The head's agent: its attempt runs where that binding is."""
    agent_digest: str | None = None
    """The digest the head is pinned to (None: any digest of the agent)."""
    handed_off: bool = False
    """An inline attempt of the head ran past its budget: its attempts are dispatched."""
    binding_retry_pending: bool = False
    """The head has a binding-retry record (a success must remove it)."""
    other_lanes_at: datetime | None = None
    """When the earliest eligible lane besides the selected one may run (the selection time,
    or the binding-retry ``not_before`` of its head); None when no other lane is eligible.
    The finish's binding delay is taken over this pre-attempt eligible set (docs/protocol.md,
    "The pass, step by step", (e)7–9)."""


class HeadView(BaseModel):
    """A lane head after the pass: what it is and what it waits for (the host workflow's
    current details show it)."""

    thread_id: str
    submission_id: str
    agent_id: str
    state: str
    waiting_for: str | None = None
    parent_submission_id: str | None = None
    """Set on a child submission: the submission that delegated to it."""
    children: list[str] | None = None
    """Set while ``waiting_for`` is ``child``: the child submissions it still waits for."""


class PassReport(BaseModel):
    """What a finish (or the failure rearm) wrote: the host's visible state after the pass."""

    outcome: PassOutcome
    generation: int
    processed: int
    nonterminal: int
    alarm_at: datetime | None
    progressed: bool = False
    """The pass settled a submission, repaired one or handed one on: more work may be ready."""
    heads: list[HeadView] | None = None
    """The first lane heads (at most ten) and what each waits for; None when the step did not
    read them (a caught-up finish, a failure rearm)."""
    reported_at: datetime | None = None
    """The clock the step computed the alarm with (the workflow's own clock stands still while
    passes follow each other inside one workflow task)."""
    host_timed_out: bool = False
    """The host plug-in's running wave outlived its join bound and was cancelled."""
