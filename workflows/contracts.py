"""Names and payloads shared by workflows and the activities they call.

One pydantic model in and one out per activity, signal and query. Payloads carry ids, numbers
and instants only; bodies stay in Postgres.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

# The payloads the ledger's pass steps return, re-exported: one definition each.
from threadwarden.protocol.passes import HeadView as HeadView
from threadwarden.protocol.passes import PassOutcome as PassOutcome
from threadwarden.protocol.passes import PassReport as PassReport

HOST_WORKFLOW = "ThreadHost"
SWEEPER_WORKFLOW = "Sweeper"
WAKE_SIGNAL = "wake"
STATUS_QUERY = "status"

BEGIN_PASS = "begin_pass"
PREPARE_NATIVE = "prepare_native"
RUN_HEAD = "run_head"
HEAD_UNSTARTED = "head_unstarted"
FINISH_PASS = "finish_pass"
FINISH_CAUGHT_UP = "finish_caught_up"
REARM_FAILURE = "rearm_failure"
SWEEP = "sweep"
DRAIN_PUBLICATIONS = "drain_publications"
DELIVER_MESSAGES = "deliver_messages"
HOST_WAVE = "host_wave"
BACKFILL_PROJECTION = "backfill_projection"
TASK_BREAK = "task_break"
"""A regular activity that does nothing, on the host's own task queue: the host workflow awaits
it to end a workflow task (`threadwarden.workflows.host.CHAIN_LIMIT`)."""

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


class WorkflowStatus(BaseModel):
    """What the host workflow's status query answers: its run's view (the ledger's view of the
    host is `threadwarden.views.HostStatus`)."""

    host_id: str
    phase: str
    passes: int
    wake_pending: bool
    last_outcome: PassOutcome | None
    next_alarm: datetime | None
    last_pass: PassReport | None = None
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
    def nothing_beside(self) -> bool:
        """No wave, delivery or backfill is started beside the native work."""
        return not (
            self.host_waves or self.host_work_due or self.messages_due or self.projection_due
        )

    @property
    def quiet(self) -> bool:
        """Nothing is due before or beside the native work: no publication to drain first,
        nothing beside it."""
        return self.publication_due is None and self.nothing_beside


class PassStepInput(BaseModel):
    """The fencing pair every step after begin carries."""

    host_id: str
    epoch: int


class FinishPlan(BaseModel):
    """What the finish needs from begin, when the head activity finishes the pass itself."""

    generation: int
    stalls: int
    jitter: float = Field(ge=0, lt=1)


class RunHeadInput(PassStepInput):
    """One head attempt, as the route decided it (built in one place: `PassSteps.route`)."""

    thread_id: str
    submission_id: str
    """The head selection picked: the attempt claims this submission or nothing."""
    agent_id: str
    agent_digest: str | None = None
    binding_retry_pending: bool = False
    repaired: int = 0
    """What recovery repaired in this pass (counts as progress for the finish)."""
    other_lanes_at: datetime | None = None
    """`Selection.other_lanes_at` (the finish's binding delay)."""
    yield_after: datetime
    pass_deadline: datetime
    """Past this the attempt is cancelled (it releases its claim first) and the pass fails."""
    finish: FinishPlan | None = None
    """Set when nothing else of the pass is running: the activity finishes the pass too, so a
    unit costs one activity instead of an activity and a step."""
    serve_ms: int | None = None
    """Set when begin runs this inline head at once: selection persisted nothing and the claim
    records the lane as served and keeps the alarm this far ahead, in its own statement."""

    @property
    def subject(self) -> str:
        """``sub_… on support-42 (agent helper)``: what the head's steps work on (summaries)."""
        pinned = f" at {self.agent_digest}" if self.agent_digest else ""
        return f"{self.submission_id} on {self.thread_id} (agent {self.agent_id}{pinned})"


class RunHeadResult(BaseModel):
    submission_id: str | None = None
    outcome: Literal["completed", "failed", "aborted"] | None = None
    admitted_at: datetime | None = None
    """When the settled submission was admitted (the worker's submit-to-settle latency)."""
    binding_error: str | None = None
    stopped: Literal["ready", "suspended", "unknown"] | None = None
    """The attempt ended without settling: it yielded, or waits for a person."""
    handed_off: bool = False
    """An inline attempt reached its inline budget and gave the head back: the next pass
    dispatches it to the agent's queue (progress: that pass follows at once)."""
    shutdown: bool = False
    """The attempt ran inline on a worker that began to shut down: it gave the head back (or
    never claimed it) and the pass ends without a rearm; the next pass runs elsewhere."""
    committed_view: Any = Field(default=None, exclude=True)
    """The host as a finish reads it, read by the attempt's last statement (after its
    settlement or stop): the finish the same activity runs next decides on it instead of
    reading again. Never serialized: it stays in the worker."""
    report: PassReport | None = None
    """The finish's report, when the activity finished the pass."""
    failure: str | None = None
    """The pass failed: in the attempt (infrastructure, the pass deadline) or in a later step
    of the pass (the binding-retry record, the finish)."""
    native_failure: bool = False
    """That failure belongs to the native work (the attempt or the binding-retry record)."""


def head_progressed(head: RunHeadInput, result: RunHeadResult) -> bool:
    """The attempt settled its head or handed it over, or recovery repaired one: the next
    pass may follow at once."""
    return result.outcome is not None or result.handed_off or head.repaired > 0


class CaughtUp(BaseModel):
    """Nothing new, or a backoff window is open: auxiliary work only, then the caught-up finish."""

    route: Literal["caught-up"] = "caught-up"


class Held(BaseModel):
    """A required sink has unpublished records: drain them first; if none is left pending, the
    native work is prepared then (`PREPARE_NATIVE`), else the pass finishes as caught up."""

    route: Literal["held"] = "held"


class Idle(BaseModel):
    """No lane is runnable: the native finish only."""

    route: Literal["idle"] = "idle"
    repaired: int = 0
    """Stalled heads recovery repaired (progress, even when no lane is runnable)."""
    other_lanes_at: datetime | None = None


class RanHere(BaseModel):
    """Begin ran the head itself (an inline binding this worker has, nothing else of the pass
    due) and, unless it failed the pass or its worker stops, the pass's finish."""

    route: Literal["ran-here"] = "ran-here"
    result: RunHeadResult


class RunHere(BaseModel):
    """An inline binding this worker has, beside auxiliary work: ``run_head`` as a local
    activity of the pass, bounded by the inline budget."""

    route: Literal["run-here"] = "run-here"
    head: RunHeadInput
    bound_ms: int
    """The local activity's start-to-close: inline budget, its grace and the finish."""


class Dispatch(BaseModel):
    """Any other binding (or an inline one's head that was handed off): ``run_head`` on the agent's
    task queue, where only workers with the binding (at its digest) poll."""

    route: Literal["dispatch"] = "dispatch"
    head: RunHeadInput


class NoPoller(BaseModel):
    """Temporal says no worker polls the head's task queue: the head backs off as
    binding-unavailable at once (`HEAD_UNSTARTED`)."""

    route: Literal["no-poller"] = "no-poller"
    head: RunHeadInput


class Stopping(BaseModel):
    """This worker is shutting down: it plans no head, and the pass ends as stopped (no rearm;
    the next pass runs on another worker)."""

    route: Literal["stopping"] = "stopping"


class BeginFailed(BaseModel):
    """Begin committed (the generation is observed), then its step failed: the pass rearms."""

    route: Literal["failed"] = "failed"
    error: str
    native: bool
    """The failure was in the native preparation (recovery or selection), not before it."""


Route = Annotated[
    CaughtUp | Held | Idle | RanHere | RunHere | Dispatch | NoPoller | Stopping | BeginFailed,
    Field(discriminator="route"),
]
"""What a pass does after begin, decided once, by begin (or, after the publication gate held
it, by `PREPARE_NATIVE`): docs/architecture.md, "The route of a head"."""


class BeginPassResult(BaseModel):
    epoch: int
    begun_at: datetime
    """The clock begin ran with: the pass's start (its yield and deadline count from it)."""
    generation: int
    stalls: int
    nonterminal: int
    pass_deadline_ms: int = 840_000
    """The whole pass is cancelled (and its retry recorded) at pass start + this."""
    head_heartbeat_ms: int = 30_000
    """Heartbeat timeout of a dispatched head attempt: the attempt lease, so a dead worker is
    noticed when its lease lapses."""
    head_start_ms: int = 60_000
    """How long a dispatched head attempt may wait on its agent's task queue for a worker with
    the binding to start it; past that the head counts as binding-unavailable."""
    idle_linger_ms: int = 0
    """How long the host's run waits for a wake once its host is idle, before it completes."""
    auxiliary: AuxiliaryPlan
    """What auxiliary work is due."""
    route: Route


class PrepareNativeInput(PassStepInput):
    now: datetime
    begun_at: datetime
    """The pass's start (the head's yield and deadline count from it)."""
    generation: int
    stalls: int
    folded: bool
    """Nothing runs beside the native work: the head's attempt finishes the pass."""


class Prepared(BaseModel):
    """`PREPARE_NATIVE`'s route (a model around the union, as activity results are)."""

    route: Route


class HeadUnstartedInput(BaseModel):
    head: RunHeadInput
    """The head activity no worker started."""
    unpolled: bool
    """No worker polled its queue at all (else none started it within ``waited_ms``)."""
    waited_ms: int = 0


class FinishPassInput(PassStepInput):
    generation: int
    stalls: int
    progressed: bool
    now: datetime
    jitter: float = Field(ge=0, lt=1)
    selected_submission_id: str | None = None
    """The head selection picked (None: no lane was runnable)."""
    other_lanes_at: datetime | None = None
    """`Selection.other_lanes_at`."""


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
