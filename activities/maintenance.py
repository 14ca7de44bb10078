"""The short, host-row steps of a maintenance pass (run as local activities)."""

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from threadwarden.activities.auxiliary import host_deadline
from threadwarden.activities.errors import domain_errors
from threadwarden.activities.pass_steps import PassSteps, clock
from threadwarden.errors import StalePass
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import (
    ALLOWANCE_ERROR,
    HostAllowanceInvalid,
    HostMaintenance,
    validate_allowance,
)
from threadwarden.ledger.deadlines import AuxiliaryDue
from threadwarden.ledger.maintenance import BeginResult as Begun
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.workflows import contracts as c

STEP_S = 30.0
"""How long begin itself may take (recovery and selection included), the bound of the short
pass steps (`workflows/passes.py` ``SHORT_STEP``)."""


@dataclass(frozen=True)
class PassLimits:
    """The time bounds of one pass, handed to the workflow by begin."""

    yield_after_ms: int = 600_000
    pass_deadline_ms: int = 840_000
    head_heartbeat_ms: int = 30_000
    head_start_ms: int = 60_000
    projection_timeout_ms: int = 30_000


class MaintenanceActivities:
    """Begin (with recovery and selection), the finishes and the failure rearm."""

    def __init__(
        self,
        maintenance: Maintenance,
        *,
        steps: PassSteps,
        failpoints: Failpoints,
        limits: PassLimits,
        gating: bool = False,
        host: HostMaintenance | None = None,
    ) -> None:
        self.inline_head: Callable[[c.RunHeadInput], Awaitable[c.RunHeadResult]] | None = None
        """Runs a head attempt here (`AttemptActivities.run`, set by the assembly): begin runs
        an inline head itself when nothing else of the pass is due."""
        self._host = host
        self._maintenance = maintenance
        self._steps = steps
        self._failpoints = failpoints
        self._limits = limits
        self._gating = gating

    @activity.defn(name=c.BEGIN_PASS)
    @domain_errors
    async def begin_pass(self, step: c.BeginPassInput) -> c.BeginPassResult:
        """Begin; when the native path is certain to run, recovery and selection too (one
        local activity for the common pass). A failure after begin committed is reported, not
        raised, so that the workflow still rearms with the generation begin observed: in
        ``error`` (before the native work: ``native_only`` false) or in ``native.error``.

        When the selected head's binding is inline here and nothing else of the pass is due,
        begin runs the attempt too, with the pass's finish (``head``): one step per pass."""
        now = clock(step.now)
        # The step's own bound (its local activity's timeout leaves room for an inline head).
        async with asyncio.timeout(STEP_S):
            result, begun = await self._begin(step, now)
        native, plan = result.native, result.auxiliary
        if (
            self.inline_head is not None
            and native is not None
            and native.inline
            and native.error is None
            and native.thread_id is not None
            and plan.quiet
        ):
            try:
                result.head = await self.inline_head(self._head_input(step, begun, native, now))
            except StalePass:
                raise  # a newer pass took over: nothing to rearm
            except ApplicationError as error:
                if error.type == c.WORKER_SHUTDOWN:
                    raise
                result.head = c.RunHeadResult(failure=_describe(error), native_failure=True)
            except Exception as failure:  # fails the pass (native), as run_head reports it
                result.head = c.RunHeadResult(failure=_describe(failure), native_failure=True)
        return result

    def _head_input(
        self, step: c.BeginPassInput, begun: Begun, native: c.NativePlan, now: datetime
    ) -> c.RunHeadInput:
        """The selected head's attempt, finishing the pass (as the workflow would ask it)."""
        assert native.thread_id is not None and native.submission_id is not None
        return c.RunHeadInput(
            host_id=step.host_id,
            epoch=begun.epoch,
            thread_id=native.thread_id,
            submission_id=native.submission_id,
            binding_retry_pending=native.binding_retry_pending,
            repaired=native.repaired,
            yield_after=now + timedelta(milliseconds=self._limits.yield_after_ms),
            pass_deadline=now + timedelta(milliseconds=self._limits.pass_deadline_ms),
            finish=c.FinishPlan(
                generation=begun.generation,
                stalls=begun.stalls,
                jitter=random.random(),
                other_lanes_at=native.other_lanes_at,
            ),
        )

    async def _begin(
        self, step: c.BeginPassInput, now: datetime
    ) -> tuple[c.BeginPassResult, Begun]:
        await self._failpoints.hit("maintenance:begin:before")
        begun = await self._maintenance.begin(step.host_id, now)
        error = None
        try:
            await self._failpoints.hit("maintenance:begin:after")
        except Exception as failure:  # begin committed: the generation is observed (§3.6)
            activity.logger.warning("pass on %s failed after begin: %r", step.host_id, failure)
            error = _describe(failure)
        native = None
        # A required sink with unpublished records may hold native work back: then the
        # workflow drains first and prepares the native work only if nothing is pending.
        held = self._gating and begun.due.publication_due is not None
        if error is None and not begun.caught_up and not held:
            try:
                native = await self._steps.prepare_native(
                    step.host_id, begun.epoch, now, begun.view
                )
            except StalePass:
                raise  # a newer pass took over: nothing to rearm (its rearm would be fenced)
            except Exception as failure:  # begin committed: the pass fails, its retry is recorded
                activity.logger.warning("pass on %s failed after begin: %r", step.host_id, failure)
                native = c.NativePlan(error=_describe(failure))
        result = c.BeginPassResult(
            **begun.model_dump(exclude={"due", "view"}),
            begun_at=now,
            yield_after_ms=self._limits.yield_after_ms,
            pass_deadline_ms=self._limits.pass_deadline_ms,
            head_heartbeat_ms=self._limits.head_heartbeat_ms,
            head_start_ms=self._limits.head_start_ms,
            auxiliary=self._auxiliary_plan(begun.due),
            native=native,
            error=error,
        )
        return result, begun

    def _auxiliary_plan(self, due: AuxiliaryDue) -> c.AuxiliaryPlan:
        """What auxiliary work is due, and the host plug-in's allowance, validated now."""
        plan = c.AuxiliaryPlan(
            publication_due=due.publication_due,
            publication_drain_due=due.is_due(due.publication_due),
            messages_due=due.is_due(due.message_due),
            projection_due=due.is_due(due.projection_due),
            projection_timeout_ms=self._limits.projection_timeout_ms,
            host_waves=self._host is not None,
            host_work_due=due.is_due(due.host_work_due),
        )
        if self._host is not None:
            try:
                plan.host_allowance_ms = validate_allowance(self._host.dispatch_timeout_ms)
            except HostAllowanceInvalid as error:  # reported by the host task, after native work
                plan.host_allowance_error = str(error)
            except Exception as error:  # a plug-in whose declaration cannot even be read
                plan.host_allowance_error = f"{ALLOWANCE_ERROR}: reading it failed: {error!r}"
        return plan

    @activity.defn(name=c.PREPARE_NATIVE)
    @domain_errors
    async def prepare_native(self, step: c.PrepareNativeInput) -> c.NativePlan:
        """Recovery and selection, when begin left them to after the publication gate."""
        return await self._steps.prepare_native(step.host_id, step.epoch, clock(step.now))

    @activity.defn(name=c.HEAD_UNSTARTED)
    @domain_errors
    async def head_unstarted(self, step: c.HeadUnstartedInput) -> c.RunHeadResult:
        """No worker with the head's binding started its attempt in time: the head backs off
        as binding-unavailable (nothing was claimed), then (folded) the pass finishes."""
        head = c.RunHeadResult(submission_id=step.head.submission_id, binding_error=step.error)
        return await self._steps.after_head(step.head, head)

    @activity.defn(name=c.FINISH_CAUGHT_UP)
    @domain_errors
    async def finish_caught_up(self, step: c.FinishCaughtUpInput) -> c.PassReport:
        await self._failpoints.hit("maintenance:finish:before")
        now = clock(step.now)
        report = await self._maintenance.finish_caught_up(
            step.host_id,
            step.epoch,
            now,
            generation=step.generation,
            extra_deadline=await host_deadline(self._host, step.host_id),
            heads=step.heads,
        )
        await self._failpoints.hit("maintenance:finish:after")
        return c.PassReport(**report.model_dump(), reported_at=now)

    @activity.defn(name=c.FINISH_PASS)
    @domain_errors
    async def finish_pass(self, step: c.FinishPassInput) -> c.PassReport:
        return await self._steps.finish(step)

    @activity.defn(name=c.REARM_FAILURE)
    @domain_errors
    async def rearm_failure(self, step: c.RearmFailureInput) -> c.PassReport:
        await self._failpoints.hit("maintenance:retry:before")
        now = clock(step.now)
        report = await self._maintenance.rearm_failure(
            step.host_id,
            step.epoch,
            generation=step.generation,
            native_only=step.native_only,
            now=now,
            jitter=step.jitter,
            error=step.error,
            extra_deadline=await host_deadline(self._host, step.host_id),
        )
        await self._failpoints.hit("maintenance:retry:after")
        return c.PassReport(**report.model_dump(), reported_at=now)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]
