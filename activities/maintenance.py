"""The short, host-row steps of a maintenance pass (run as local activities)."""

import asyncio
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from temporalio import activity

from threadwarden.activities.attempt import HeadRunner
from threadwarden.activities.errors import domain_errors
from threadwarden.activities.pass_steps import SHORT_STEP_MS, PassSteps, clock, describe
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
from threadwarden.workflows import contracts


@dataclass(eq=False)
class MaintenanceActivities:
    """Begin (with recovery, selection and the head's route), the finishes and the rearm."""

    maintenance: Maintenance
    _: KW_ONLY
    steps: PassSteps
    runner: HeadRunner
    failpoints: Failpoints
    gating: bool = False
    """The worker has a required publication sink: the host's unpublished records hold its
    native work back until they are drained (docs/architecture.md, "Words")."""
    host: HostMaintenance | None = None

    @activity.defn(name=contracts.BEGIN_PASS)
    @domain_errors
    async def begin_pass(self, step: contracts.BeginPassInput) -> contracts.BeginPassResult:
        """Begin, then the pass's route (`PassSteps.route`). A failure after begin committed
        is reported in the route (`BeginFailed`), not raised, so that the workflow still
        rearms with the generation begin observed; this step raises only before its commit,
        when superseded, or past its own bound.

        When the head runs here and nothing else of the pass is due, begin runs the attempt
        too, with the pass's finish (`RanHere`): one step per pass."""
        now = clock(step.now)
        async with asyncio.timeout(SHORT_STEP_MS / 1000):  # begin's own part of this step
            begun, route, plan = await self._begin(step, now)
        if isinstance(route, contracts.RunHere) and plan.quiet:
            try:
                result = await self.runner.run(route.head)
            except StalePass:
                raise  # a newer pass took over: nothing to rearm
            except Exception as failure:  # fails the pass (native), as run_head reports it
                result = contracts.RunHeadResult(failure=describe(failure), native_failure=True)
            route = contracts.RanHere(result=result)
        return contracts.BeginPassResult(
            epoch=begun.epoch,
            begun_at=now,
            generation=begun.generation,
            stalls=begun.stalls,
            nonterminal=begun.nonterminal,
            pass_deadline_ms=self.steps.limits.pass_deadline_ms,
            head_heartbeat_ms=self.steps.limits.head_heartbeat_ms,
            head_start_ms=self.steps.limits.head_start_ms,
            idle_linger_ms=self.steps.limits.idle_linger_ms,
            auxiliary=plan,
            route=route,
        )

    async def _begin(
        self, step: contracts.BeginPassInput, now: datetime
    ) -> tuple[Begun, contracts.Route, contracts.AuxiliaryPlan]:
        await self.failpoints.hit("maintenance:begin:before")
        begun = await self.maintenance.begin(step.host_id, now)
        plan = self._auxiliary_plan(begun.due)
        try:
            await self.failpoints.hit("maintenance:begin:after")
        except Exception as failure:  # begin committed: the generation is observed (§3.6)
            activity.logger.warning("pass on %s failed after begin: %r", step.host_id, failure)
            return begun, contracts.BeginFailed(error=describe(failure), native=False), plan
        if begun.caught_up:
            return begun, contracts.CaughtUp(), plan
        # A required sink with unpublished records may hold native work back: then the
        # workflow drains first and prepares the native work only if nothing is pending.
        if self.gating and begun.due.publication_due is not None:
            return begun, contracts.Held(), plan
        try:
            route = await self.steps.route(
                contracts.PassStepInput(host_id=step.host_id, epoch=begun.epoch),
                now,
                begun_at=now,
                generation=begun.generation,
                stalls=begun.stalls,
                folded=plan.nothing_beside,
                view=begun.view,
                runs_now=plan.quiet,
            )
        except StalePass:
            raise  # a newer pass took over: nothing to rearm (its rearm would be fenced)
        except Exception as failure:  # begin committed: the pass fails, its retry is recorded
            activity.logger.warning("pass on %s failed after begin: %r", step.host_id, failure)
            route = contracts.BeginFailed(error=describe(failure), native=True)
        return begun, route, plan

    def _auxiliary_plan(self, due: AuxiliaryDue) -> contracts.AuxiliaryPlan:
        """What auxiliary work is due, and the host plug-in's allowance, validated now."""
        plan = contracts.AuxiliaryPlan(
            publication_due=due.publication_due,
            publication_drain_due=due.is_due(due.publication_due),
            messages_due=due.is_due(due.message_due),
            projection_due=due.is_due(due.projection_due),
            projection_timeout_ms=self.steps.limits.projection_timeout_ms,
            host_waves=self.host is not None,
            host_work_due=due.is_due(due.host_work_due),
        )
        if self.host is not None:
            try:
                plan.host_allowance_ms = validate_allowance(self.host.dispatch_timeout_ms)
            except HostAllowanceInvalid as error:  # reported by the host task, after native work
                plan.host_allowance_error = str(error)
            except Exception as error:  # a plug-in whose declaration cannot even be read
                plan.host_allowance_error = f"{ALLOWANCE_ERROR}: reading it failed: {error!r}"
        return plan

    @activity.defn(name=contracts.PREPARE_NATIVE)
    @domain_errors
    async def prepare_native(self, step: contracts.PrepareNativeInput) -> contracts.Prepared:
        """Recovery, selection and the head's route, when the publication gate held them."""
        route = await self.steps.route(
            contracts.PassStepInput(host_id=step.host_id, epoch=step.epoch),
            clock(step.now),
            begun_at=step.begun_at,
            generation=step.generation,
            stalls=step.stalls,
            folded=step.folded,
        )
        return contracts.Prepared(route=route)

    @activity.defn(name=contracts.HEAD_UNSTARTED)
    @domain_errors
    async def head_unstarted(self, step: contracts.HeadUnstartedInput) -> contracts.RunHeadResult:
        """No worker with the head's binding started its attempt in time: the head backs off
        as binding-unavailable (nothing was claimed), then (folded) the pass finishes."""
        head = step.head
        pinned = f" at digest {head.agent_digest}" if head.agent_digest else ""
        waited = (
            "polls its task queue"
            if step.unpolled
            else f"started the head within {step.waited_ms} ms"
        )
        error = (
            f"agent {head.agent_id}: no worker with its binding{pinned} {waited}"
            f" (submission {head.submission_id} stays pending)"
        )
        result = contracts.RunHeadResult(submission_id=head.submission_id, binding_error=error)
        return await self.steps.after_head(head, result)

    @activity.defn(name=contracts.FINISH_CAUGHT_UP)
    @domain_errors
    async def finish_caught_up(self, step: contracts.FinishCaughtUpInput) -> contracts.PassReport:
        return await self.steps.finish_caught_up(step)

    @activity.defn(name=contracts.FINISH_PASS)
    @domain_errors
    async def finish_pass(self, step: contracts.FinishPassInput) -> contracts.PassReport:
        return await self.steps.finish(step)

    @activity.defn(name=contracts.REARM_FAILURE)
    @domain_errors
    async def rearm_failure(self, step: contracts.RearmFailureInput) -> contracts.PassReport:
        return await self.steps.rearm_failure(step)


@activity.defn(name=contracts.TASK_BREAK)
async def task_break(sleep_ms: int = 0) -> None:
    """Nothing but, when asked, a sleep of under a second: the host workflow awaits this
    activity to end its workflow task, its completion coming back in the next task
    (`threadwarden.workflows.host.CHAIN_LIMIT`), or to wait for an alarm due too soon for a
    timer (`threadwarden.workflows.host.TIMER_SHIFT`)."""
    if sleep_ms > 0:
        await asyncio.sleep(min(sleep_ms, 1_000) / 1000)
