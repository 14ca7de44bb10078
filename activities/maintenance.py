"""The short, host-row steps of a maintenance pass (run as local activities)."""

from dataclasses import dataclass

from temporalio import activity

from activities.auxiliary import AuxiliaryActivities, host_deadline
from activities.errors import domain_errors
from ledger.deadlines import AuxiliaryDue
from ledger.maintenance import Maintenance
from ledger.models import from_ms
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import (
    ALLOWANCE_ERROR,
    HostAllowanceInvalid,
    HostMaintenance,
    validate_allowance,
)
from workflows import contracts as c


@dataclass(frozen=True)
class PassLimits:
    """The time bounds of one pass, handed to the workflow by begin."""

    yield_after_ms: int = 600_000
    pass_deadline_ms: int = 840_000
    head_heartbeat_ms: int = 30_000
    projection_timeout_ms: int = 30_000


class MaintenanceActivities:
    """Begin, recovery, lane selection, binding bookkeeping, finish and failure rearm."""

    def __init__(
        self,
        maintenance: Maintenance,
        *,
        auxiliary: AuxiliaryActivities,
        failpoints: Failpoints,
        limits: PassLimits,
        host: HostMaintenance | None = None,
    ) -> None:
        self._host = host
        self._maintenance = maintenance
        self._auxiliary = auxiliary
        self._failpoints = failpoints
        self._limits = limits

    @activity.defn(name=c.BEGIN_PASS)
    @domain_errors
    async def begin_pass(self, step: c.BeginPassInput) -> c.BeginPassResult:
        await self._failpoints.hit("maintenance:begin:before")
        begun = await self._maintenance.begin(step.host_id, step.now)
        await self._failpoints.hit("maintenance:begin:after")
        return c.BeginPassResult(
            **begun.model_dump(exclude={"due"}),
            yield_after_ms=self._limits.yield_after_ms,
            pass_deadline_ms=self._limits.pass_deadline_ms,
            head_heartbeat_ms=self._limits.head_heartbeat_ms,
            auxiliary=self._auxiliary_plan(begun.due),
        )

    def _auxiliary_plan(self, due: AuxiliaryDue) -> c.AuxiliaryPlan:
        """What auxiliary work is due, and the host plug-in's allowance, validated now."""
        plan = c.AuxiliaryPlan(
            publication_due=due.publication_due,
            publication_drain_due=due.is_due(due.publication_due),
            messages_due=due.is_due(due.message_due),
            projection_due=due.is_due(due.projection_due),
            projection_timeout_ms=self._limits.projection_timeout_ms,
            host_waves=self._host is not None,
        )
        if self._host is not None:
            try:
                plan.host_allowance_ms = validate_allowance(self._host.dispatch_timeout_ms)
            except HostAllowanceInvalid as error:  # reported by the host task, after native work
                plan.host_allowance_error = str(error)
            except Exception as error:  # a plug-in whose declaration cannot even be read
                plan.host_allowance_error = f"{ALLOWANCE_ERROR}: reading it failed: {error!r}"
        return plan

    @activity.defn(name=c.FINISH_CAUGHT_UP)
    @domain_errors
    async def finish_caught_up(self, step: c.FinishCaughtUpInput) -> c.PassReport:
        if not step.auxiliary_done:
            await self._auxiliary.finish_step_work(step.host_id)
        await self._failpoints.hit("maintenance:finish:before")
        report = await self._maintenance.finish_caught_up(
            step.host_id,
            step.epoch,
            step.now,
            generation=step.generation,
            extra_deadline=await host_deadline(self._host, step.host_id),
        )
        await self._failpoints.hit("maintenance:finish:after")
        return c.PassReport(**report.model_dump())

    @activity.defn(name=c.RECOVER)
    @domain_errors
    async def recover(self, step: c.PassStepInput) -> c.RecoverResult:
        recovery = await self._maintenance.recover(step.host_id, step.epoch)
        return c.RecoverResult(**recovery.model_dump())

    @activity.defn(name=c.SELECT_LANE)
    @domain_errors
    async def select_lane(self, step: c.SelectLaneInput) -> c.SelectLaneResult:
        await self._failpoints.hit("maintenance:select:before")
        selection = await self._maintenance.select_lane(step.host_id, step.epoch, step.now)
        await self._failpoints.hit("maintenance:select:after")
        return c.SelectLaneResult(**selection.model_dump())

    @activity.defn(name=c.RECORD_BINDING_RESULT)
    @domain_errors
    async def record_binding_result(self, step: c.BindingResultInput) -> c.BindingResultResult:
        await self._failpoints.hit("maintenance:binding-retry:before")
        entry, report = await self._maintenance.record_binding_result(
            step.host_id,
            step.epoch,
            thread_id=step.thread_id,
            submission_id=step.submission_id,
            failed=step.failed,
            now=step.now,
        )
        await self._failpoints.hit("maintenance:binding-retry:after")
        if entry is not None:
            log = activity.logger.error if report else activity.logger.debug
            log(
                "submission %s awaits a compatible binding; original work remains pending"
                " (attempt %d, next at %s): %s",
                step.submission_id,
                entry.attempts,
                from_ms(entry.not_before).isoformat(),
                step.error,
            )
        return c.BindingResultResult(
            attempts=entry.attempts if entry else 0,
            not_before=from_ms(entry.not_before) if entry else None,
            reported=report,
        )

    @activity.defn(name=c.FINISH_PASS)
    @domain_errors
    async def finish_pass(self, step: c.FinishPassInput) -> c.PassReport:
        if not step.auxiliary_done:
            await self._auxiliary.finish_step_work(step.host_id)
        await self._failpoints.hit("maintenance:finish:before")
        report = await self._maintenance.finish(
            step.host_id,
            step.epoch,
            generation=step.generation,
            stalls=step.stalls,
            progressed=step.progressed,
            now=step.now,
            jitter=step.jitter,
            extra_deadline=await host_deadline(self._host, step.host_id),
        )
        await self._failpoints.hit("maintenance:finish:after")
        return c.PassReport(**report.model_dump())

    @activity.defn(name=c.REARM_FAILURE)
    @domain_errors
    async def rearm_failure(self, step: c.RearmFailureInput) -> c.PassReport:
        await self._failpoints.hit("maintenance:retry:before")
        report = await self._maintenance.rearm_failure(
            step.host_id,
            step.epoch,
            generation=step.generation,
            native_only=step.native_only,
            now=step.now,
            jitter=step.jitter,
            error=step.error,
            extra_deadline=await host_deadline(self._host, step.host_id),
        )
        await self._failpoints.hit("maintenance:retry:after")
        return c.PassReport(**report.model_dump())
