"""The pass steps shared by the begin step and the head activity: recovery with selection and
the head's route (decided here, once), the binding-retry record and the native finish; and the
pass's other endings (the caught-up finish, the failure's rearm). Each is fenced by the pass
epoch; the head activity runs the binding-retry record and the finish itself when nothing else
of its pass is running (one activity per unit)."""

import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity

from threadwarden.activities.auxiliary import host_deadline
from threadwarden.activities.pollers import HeadPollers
from threadwarden.activities.quick_heads import QuickHeads
from threadwarden.activities.wake import Waker
from threadwarden.errors import StalePass
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.maintenance import HostView, Maintenance
from threadwarden.ledger.models import from_ms
from threadwarden.protocol.passes import PassReport, Selection
from threadwarden.workflows import contracts
from threadwarden.workflows.passes import SHORT_STEP

logger = logging.getLogger(__name__)

SHORT_STEP_MS = int(SHORT_STEP / timedelta(milliseconds=1))
"""How long a short pass step may take (begin with recovery and selection, a finish): the
bound of the workflow's local steps, `SHORT_STEP`, in the milliseconds the steps count in."""
INLINE_HARD_BOUND_MS = 30_000
"""The longest an inline attempt runs, whatever its steps: the budget never cuts a step in
flight (an attempt past it yields at a committed boundary), but a step that declared nothing and
hangs is cut off here, so it cannot hold a local-activity slot for long. The head is then handed
over and the step runs again, dispatched. Within begin's bound (`workflows/passes.py`
``BEGIN_BOUND``: begin's own 30 s, this, the finish's 30 s)."""

_SELECTED = {
    "thread_id",
    "submission_id",
    "agent_id",
    "agent_digest",
    "binding_retry_pending",
    "other_lanes_at",
}
"""What a head attempt's input takes from the selection as it is."""


@dataclass(frozen=True)
class PassLimits:
    """The time bounds of one pass, handed to the workflow by begin; the worker's settings
    give each its value (docs/configuration.md)."""

    yield_after_ms: int
    pass_deadline_ms: int
    head_heartbeat_ms: int
    head_start_ms: int
    projection_timeout_ms: int
    inline_budget_ms: int
    """How long an inline attempt runs on the pass's worker before it hands its head over to
    the agent's queue, at a committed boundary (docs/architecture.md, "The route of a head")."""
    idle_linger_ms: int = 0
    """How long the host's run waits for a wake once its host is idle (`HostWorkflow`)."""

    @property
    def inline_bound_ms(self) -> int:
        """The longest an inline head's local activity runs (its start-to-close): the attempt's
        hard bound, then the binding-retry record and finish after it."""
        return INLINE_HARD_BOUND_MS + SHORT_STEP_MS


@dataclass(eq=False)
class PassSteps:
    """One instance per worker: the ledger's pass transactions with their failpoints."""

    maintenance: Maintenance
    _: KW_ONLY
    failpoints: Failpoints
    host: HostMaintenance | None
    limits: PassLimits
    waker: Waker | None = None
    pollers: HeadPollers | None = None
    bindings: Mapping[str, str] = field(default_factory=dict)
    """Every binding this worker has: agent id → digest."""
    inline: frozenset[str] = frozenset()
    """The agents of those bindings declared inline."""
    quick: QuickHeads = field(default_factory=lambda: QuickHeads(quick_ms=0, budget_ms=0))
    """The agents whose attempts have been quick here: their heads run inline too."""

    async def route(
        self,
        step: contracts.PassStepInput,
        now: datetime,
        *,
        begun_at: datetime,
        generation: int,
        stalls: int,
        folded: bool,
        view: HostView | None = None,
        runs_now: bool = False,
    ) -> contracts.Route:
        """Recovery (only when some head is stalled), round-robin selection, then where the
        selected head runs: the one place a head's attempt is planned.

        ``view`` is what begin read; recovery changes the heads, so after it they are re-read.
        ``folded``: nothing runs beside the native work, so the attempt finishes the pass.
        ``runs_now``: an inline head would run at once (begin runs it, nothing else being due),
        so its claim writes the selection (`RunHeadInput.serve_ms`) instead of a statement
        here; any other pick is persisted here, before its attempt may wait for a slot or a
        worker.
        """
        if activity.is_worker_shutdown():
            return contracts.Stopping()  # plan nothing here: the next pass runs on another worker
        repaired = 0
        if view is None or view.stalled:
            recovery = await self.maintenance.recover(step.host_id, step.epoch)
            repaired, view = recovery.repaired, None
            for parent_host in dict.fromkeys(recovery.parent_hosts):
                if self.waker is not None:  # a child recovery settled: its parent may go on
                    await self.waker.wake(parent_host, reason="child-settled")
        await self.failpoints.hit("maintenance:select:before")
        wait_ms = self.limits.head_start_ms
        selection = await self.maintenance.select_lane(
            step.host_id, step.epoch, now, view, head_wait_ms=wait_ms, persist=False
        )
        if selection.thread_id is None:
            await self.failpoints.hit("maintenance:select:after")
            return contracts.Idle(repaired=repaired, other_lanes_at=selection.other_lanes_at)
        assert selection.submission_id is not None and selection.agent_id is not None
        inline = self._runs_inline(selection)
        if not (inline and runs_now):
            until = now + timedelta(milliseconds=wait_ms)
            await self.maintenance.serve_lane(step.host_id, step.epoch, selection.thread_id, until)
        await self.failpoints.hit("maintenance:select:after")
        finish = None
        if folded:
            finish = contracts.FinishPlan(
                generation=generation, stalls=stalls, jitter=random.random()
            )
        head = contracts.RunHeadInput(
            **step.model_dump(),
            **selection.model_dump(include=_SELECTED),
            repaired=repaired,
            yield_after=begun_at + timedelta(milliseconds=self.limits.yield_after_ms),
            pass_deadline=begun_at + timedelta(milliseconds=self.limits.pass_deadline_ms),
            finish=finish,
            serve_ms=wait_ms if inline and runs_now else None,
        )
        if inline:
            return contracts.RunHere(head=head, bound_ms=self.limits.inline_bound_ms)
        if self.pollers is not None and await self.pollers.unpolled(
            selection.agent_id, selection.agent_digest
        ):
            return contracts.NoPoller(head=head)
        return contracts.Dispatch(head=head)

    def _runs_inline(self, selection: Selection) -> bool:
        """A binding this worker has at the head's pinned digest, declared inline or quick here
        (`QuickHeads`), a head no inline attempt handed over yet, and a worker that allows
        inline heads (a budget)."""
        agent = selection.agent_id or ""
        digest = self.bindings.get(agent)
        return (
            digest is not None
            and (agent in self.inline or self.quick.quick(agent, digest))
            and self.limits.inline_budget_ms > 0
            and selection.agent_digest in (None, digest)
            and not selection.handed_off
        )

    async def record_binding_result(
        self, step: contracts.RunHeadInput, submission_id: str, error: str | None
    ) -> None:
        """Back the head off while its binding is missing; a success removes its entry."""
        await self.failpoints.hit("maintenance:binding-retry:before")
        entry, report = await self.maintenance.record_binding_result(
            step.host_id,
            step.epoch,
            thread_id=step.thread_id,
            submission_id=submission_id,
            failed=error is not None,
            now=datetime.now(UTC),
        )
        await self.failpoints.hit("maintenance:binding-retry:after")
        if entry is not None:
            # An expected wait (a binding not deployed yet, or no worker with it up): one
            # warning per entry and 15 minutes, debug in between.
            log = logger.warning if report else logger.debug
            log(
                "submission %s awaits a compatible binding; original work remains pending"
                " (attempt %d, next at %s): %s",
                submission_id,
                entry.attempts,
                from_ms(entry.not_before).isoformat(),
                error,
            )

    async def finish(self, step: contracts.FinishPassInput, view: Any = None) -> PassReport:
        """Acknowledge the observed generation and set the alarm (docs/protocol.md, "The pass,
        step by step", (e)7–9); ``view``: the host as the attempt's last statement read it
        (`RunHeadResult.committed_view`), decided on instead of a first read."""
        return await self._ending(
            "maintenance:finish",
            step,
            lambda now, deadline: self.maintenance.finish(
                step.host_id,
                step.epoch,
                generation=step.generation,
                stalls=step.stalls,
                progressed=step.progressed,
                now=now,
                jitter=step.jitter,
                extra_deadline=deadline,
                selected=step.selected_submission_id,
                other_lanes_at=step.other_lanes_at,
                view=view,
            ),
        )

    async def finish_caught_up(self, step: contracts.FinishCaughtUpInput) -> PassReport:
        """A caught-up pass's finish: nothing new to run, the alarm set."""
        return await self._ending(
            "maintenance:finish",
            step,
            lambda now, deadline: self.maintenance.finish_caught_up(
                step.host_id,
                step.epoch,
                now,
                generation=step.generation,
                extra_deadline=deadline,
                heads=step.heads,
            ),
        )

    async def rearm_failure(self, step: contracts.RearmFailureInput) -> PassReport:
        """A failed pass's durable retry, with backoff."""
        return await self._ending(
            "maintenance:retry",
            step,
            lambda now, deadline: self.maintenance.rearm_failure(
                step.host_id,
                step.epoch,
                generation=step.generation,
                native_only=step.native_only,
                now=now,
                jitter=step.jitter,
                error=step.error,
                extra_deadline=deadline,
            ),
        )

    async def _ending(
        self,
        failpoint: str,
        step: contracts.FinishPassInput
        | contracts.FinishCaughtUpInput
        | contracts.RearmFailureInput,
        write: Callable[[datetime, datetime | None], Awaitable[PassReport]],
    ) -> PassReport:
        """One of the pass's ending transactions, between the failpoints ``{failpoint}:before``
        and ``{failpoint}:after``, given the time (`clock`) and the host plug-in's pending
        deadline (it joins the alarm)."""
        await self.failpoints.hit(f"{failpoint}:before")
        now = clock(step.now)
        report = await write(now, await host_deadline(self.host, step.host_id))
        await self.failpoints.hit(f"{failpoint}:after")
        return report

    async def after_head(
        self, step: contracts.RunHeadInput, head: contracts.RunHeadResult
    ) -> contracts.RunHeadResult:
        """After the head attempt, or after no worker started it (docs/protocol.md, "The pass,
        step by step", (e)): the binding-retry record, then (folded) the native finish. A
        failure here fails the pass after the attempt (reported, never raised: the attempt's
        outcome is already committed)."""
        view = head.committed_view  # what the attempt's last statement read of the host
        if head.binding_error is not None or step.binding_retry_pending:
            view = None  # the binding-retry record writes the host row without a version
            try:
                await self.record_binding_result(
                    step, head.submission_id or step.submission_id, head.binding_error
                )
            except StalePass:
                raise
            except Exception as error:
                head.failure, head.native_failure = describe(error), True
                return head
        if step.finish is None:
            return head
        try:
            head.report = await self.finish(
                contracts.FinishPassInput(
                    host_id=step.host_id,
                    epoch=step.epoch,
                    generation=step.finish.generation,
                    stalls=step.finish.stalls,
                    progressed=contracts.head_progressed(step, head),
                    now=datetime.now(UTC),
                    jitter=step.finish.jitter,
                    selected_submission_id=step.submission_id,
                    other_lanes_at=step.other_lanes_at,
                ),
                view=view,
            )
        except StalePass:
            raise
        except Exception as error:
            head.failure = describe(error)
        return head


def clock(now: datetime) -> datetime:
    """The later of the workflow's ``now`` and this worker's clock. A workflow's clock stands
    still inside one workflow task, and several passes may run in one (their steps are local
    activities); a time-skipping test server runs ahead of the wall clock."""
    return max(now, datetime.now(UTC))


def describe(error: BaseException) -> str:
    """An error as a pass records it: its type and text, at most 500 characters."""
    return f"{type(error).__name__}: {error}"[:500]
