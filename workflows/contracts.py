"""Names and payloads shared by workflows and the activities they call.

One pydantic model in and one out per activity, signal and query. Payloads carry ids, numbers
and instants only; bodies stay in Postgres.
"""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

HOST_WORKFLOW = "HostMaintenance"
SWEEPER_WORKFLOW = "Sweeper"
WAKE_SIGNAL = "wake"
STATUS_QUERY = "status"

BEGIN_PASS = "begin_pass"
PREPARE_NATIVE = "prepare_native"
RUN_HEAD = "run_head"
WORKER_SHUTDOWN = "WorkerShutdown"
"""The error type of an inline head cut off by its worker's shutdown."""
HEAD_UNSTARTED = "head_unstarted"
FINISH_PASS = "finish_pass"
FINISH_CAUGHT_UP = "finish_caught_up"
REARM_FAILURE = "rearm_failure"
SWEEP = "sweep"
DRAIN_PUBLICATIONS = "drain_publications"
DELIVER_MESSAGES = "deliver_messages"
HOST_WAVE = "host_wave"
BACKFILL_PROJECTION = "backfill_projection"

PassOutcome = Literal["caught-up", "actionable", "failed"]
PASS_DEADLINE_ERROR = "maintenance pass deadline"
"""The error a pass that ran past its deadline records."""


def host_workflow_id(host_id: str) -> str:
    """The one workflow id per host: Temporal's id uniqueness makes the host's owner loop."""
    return f"threadwarden-host/{host_id}"


def head_task_queue(task_queue: str, agent_id: str, agent_digest: str | None = None) -> str:
    """The task queue of the head attempts for ``agent_id`` (pinned to ``agent_digest``): only
    workers that register that binding (at that digest) poll it (docs/architecture.md,
    binding-aware routing)."""
    queue = f"{task_queue}/agent/{agent_id}"
    return queue if agent_digest is None else f"{queue}/digest/{agent_digest}"


def sweeper_workflow_id(task_queue: str) -> str:
    """One sweeper per task queue."""
    return f"threadwarden-sweeper/{task_queue}"


class HostInput(BaseModel):
    host_id: str
    passes: int = 0
    """Passes run by earlier runs of this chain (continue-as-new carries it for visibility)."""


class HostResult(BaseModel):
    host_id: str
    passes: int
    last_outcome: PassOutcome | None


class WakeInput(BaseModel):
    reason: str = "mutation"


class HostStatus(BaseModel):
    host_id: str
    phase: str
    passes: int
    wake_pending: bool
    last_outcome: PassOutcome | None
    next_alarm: datetime | None
    last_pass: "PassReport | None" = None
    """The last pass's report (the memo is not written per pass: history is a cost)."""


class BeginPassInput(BaseModel):
    host_id: str
    now: datetime


class AuxiliaryPlan(BaseModel):
    """The auxiliary work of one pass, as begin found it."""

    publication_due: datetime | None = None
    """The earliest unpublished record's next attempt."""
    publication_drain_due: bool = False
    """That attempt has come, on the database's clock."""
    messages_due: bool = False
    """A message of this host is due for delivery."""
    projection_due: bool = False
    """Some thread summary of this host is missing or behind its records."""
    projection_timeout_ms: int = 30_000
    host_waves: bool = False
    """The worker carries a host plug-in."""
    host_allowance_ms: int | None = None
    """The plug-in's validated whole-wave allowance."""
    host_allowance_error: str | None = None
    """Why the declared allowance is invalid (the host fiber fails with it)."""
    host_work_due: bool = False
    """Host work marked durably (`hosts.host_work_due_at`) has come: the first wave takes it."""

    @property
    def quiet(self) -> bool:
        """Nothing is due before or beside the native work: no publication to drain first, no
        wave, delivery or backfill to start beside it."""
        return self.publication_due is None and not (
            self.host_waves or self.host_work_due or self.messages_due or self.projection_due
        )


class BeginPassResult(BaseModel):
    epoch: int
    begun_at: datetime | None = None
    """The clock begin ran with: the pass's start (its yield and deadline count from it)."""
    generation: int
    caught_up: bool
    stalls: int
    nonterminal: int
    yield_after_ms: int = 600_000
    """The head attempt yields at a committed boundary after pass start + this."""
    pass_deadline_ms: int = 840_000
    """The whole pass is cancelled (and its retry recorded) at pass start + this."""
    head_heartbeat_ms: int = 30_000
    """Heartbeat timeout of the head attempt: the attempt lease, so a dead worker is noticed
    when its lease lapses."""
    head_start_ms: int = 60_000
    """How long the head attempt may wait on its agent's task queue for a worker with the
    binding to start it; past that the head counts as binding-unavailable (binding retry)."""
    auxiliary: AuxiliaryPlan
    """What auxiliary work is due."""
    native: "NativePlan | None" = None
    """Recovery and lane selection, done by begin when the native path is certain to run
    (not caught up, no required publication pending)."""
    error: str | None = None
    """Begin committed, then its step failed (e.g. at ``maintenance:begin:after``): the
    generation is observed, so the pass fails and records its retry (``native_only`` false,
    as no native work had started)."""
    head: "RunHeadResult | None" = None
    """Begin ran the selected head itself (an inline binding this worker has, nothing else of
    the pass due) and, unless the attempt failed the pass, the pass's finish: the whole pass
    was this one step."""


class PassStepInput(BaseModel):
    """The fencing pair every step after begin carries."""

    host_id: str
    epoch: int


class PrepareNativeInput(PassStepInput):
    now: datetime


class NativePlan(BaseModel):
    """Recovery and lane selection: the native work's preparation."""

    repaired: int = 0
    """Stalled heads recovery repaired (progress, even when no lane is runnable)."""
    thread_id: str | None = None
    """The selected lane (None: nothing runnable)."""
    submission_id: str | None = None
    """The selected thread's head."""
    agent_id: str | None = None
    """The head's agent: its attempt runs on that agent's task queue."""
    agent_digest: str | None = None
    """The digest the head is pinned to (None: any digest of the agent)."""
    binding_retry_pending: bool = False
    """The head has a binding-retry record (a success must remove it)."""
    unpolled: bool = False
    """Temporal says no worker polls the head's task queue: no worker has its binding (at that
    digest), so the head is binding-unavailable at once, without waiting to be started."""
    inline: bool = False
    """The worker that prepared the pass has the head's binding (at its pinned digest) and the
    binding is inline: the attempt runs there, as a local activity of this pass."""
    other_lanes_at: datetime | None = None
    """When the earliest eligible lane besides the selected one may run; None when no other
    lane is eligible (the finish's binding delay is taken over the pre-attempt set)."""
    error: str | None = None
    """Recovery or selection failed after begin committed: the pass fails (native)."""


class FinishPlan(BaseModel):
    """What the finish needs from begin, when the head activity finishes the pass itself."""

    generation: int
    stalls: int
    jitter: float = Field(ge=0, lt=1)
    other_lanes_at: datetime | None = None
    """`NativePlan.other_lanes_at`."""


class RunHeadInput(PassStepInput):
    thread_id: str
    submission_id: str
    """The head selection picked (the binding retry is recorded against it)."""
    binding_retry_pending: bool = False
    repaired: int = 0
    """What recovery repaired in this pass (counts as progress for the finish)."""
    yield_after: datetime
    pass_deadline: datetime
    """Past this the attempt is cancelled (it releases its claim first) and the pass fails."""
    finish: FinishPlan | None = None
    """Set when nothing else of the pass is running: the activity finishes the pass too, so a
    unit costs one activity instead of an activity and a step."""


class HeadUnstartedInput(BaseModel):
    head: RunHeadInput
    """The head activity no worker started."""
    error: str
    """Why: no worker with the agent's binding (at its pinned digest) polled in time."""


class RunHeadResult(BaseModel):
    submission_id: str | None = None
    outcome: Literal["completed", "failed", "aborted"] | None = None
    admitted_at: datetime | None = None
    """When the settled submission was admitted (the worker's submit-to-settle latency)."""
    binding_error: str | None = None
    stopped: Literal["ready", "suspended", "unknown"] | None = None
    """The attempt ended without settling: it yielded, or waits for a person."""
    report: "PassReport | None" = None
    """The finish's report, when the activity finished the pass."""
    failure: str | None = None
    """A later step of the pass failed after the attempt (binding-retry record or finish)."""
    native_failure: bool = False
    """That failure belongs to the native work (the binding-retry record)."""


class FinishPassInput(PassStepInput):
    generation: int
    stalls: int
    progressed: bool
    now: datetime
    jitter: float = Field(ge=0, lt=1)
    selected_submission_id: str | None = None
    """The head selection picked (None: no lane was runnable)."""
    other_lanes_at: datetime | None = None
    """`NativePlan.other_lanes_at`."""


class FinishCaughtUpInput(PassStepInput):
    now: datetime
    generation: int
    """The generation begin observed."""
    heads: bool = False
    """Read the lane heads too: the run shows none yet (a new run, or one whose earlier passes
    were lost with a refused workflow task) and some submission is nonterminal."""


class RearmFailureInput(PassStepInput):
    generation: int
    native_only: bool
    now: datetime
    jitter: float = Field(ge=0, lt=1)
    error: str


class PublicationResult(BaseModel):
    published: int
    pending: datetime | None
    """Set while a required sink still has unpublished records: native work waits."""


class DeliverInput(BaseModel):
    host_id: str
    dispatch_until: datetime


class DeliverResult(BaseModel):
    delivered: int = 0
    retried: int = 0
    rejected: int = 0
    more: bool = False
    """The batch was full: more messages may be due (delivered by the next batch or pass)."""


class HostWaveInput(BaseModel):
    host_id: str
    dispatch_until: datetime
    allowance_ms: int
    """The validated whole-wave allowance (recorded on the wave's span)."""
    take_host_work: bool = False
    """Take the host's due work mark before the wave (put back if the wave fails)."""


class HostWaveResult(BaseModel):
    more: bool


class BackfillResult(BaseModel):
    refreshed: int = 0
    timed_out: bool = False


class HeadView(BaseModel):
    """A lane head after the pass, for the host workflow's current details."""

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
    """What the finish step wrote: the host's visible state after the pass."""

    outcome: PassOutcome
    generation: int
    processed: int
    nonterminal: int
    alarm_at: datetime | None
    progressed: bool = False
    """The pass settled a submission or repaired one: more work may be ready right away."""
    heads: list[HeadView] | None = None
    """The first lane heads (at most ten) and what each waits for; None when the step did not
    read them (a caught-up finish, a failure rearm)."""
    host_timed_out: bool = False
    """The host plug-in's running wave outlived its join bound and was cancelled."""
    reported_at: datetime | None = None
    """The clock the step computed the alarm with (the workflow's own clock stands still while
    passes follow each other inside one workflow task)."""


class SweeperInput(BaseModel):
    iterations: int = 0


class SweepInput(BaseModel):
    limit: int = 500


class SweepResult(BaseModel):
    woken: int
    interval_ms: int


HostStatus.model_rebuild()
BeginPassResult.model_rebuild()
RunHeadResult.model_rebuild()
