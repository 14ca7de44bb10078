"""The short, host-row steps of a maintenance pass (run as local activities)."""

from temporalio import activity

from activities.errors import domain_errors
from ledger.maintenance import Maintenance
from workflows import contracts as c


class MaintenanceActivities:
    """Begin, recovery, lane selection, finish and failure rearm of one pass."""

    def __init__(self, maintenance: Maintenance) -> None:
        self._maintenance = maintenance

    @activity.defn(name=c.BEGIN_PASS)
    @domain_errors
    async def begin_pass(self, step: c.BeginPassInput) -> c.BeginPassResult:
        begun = await self._maintenance.begin(step.host_id, step.now)
        return c.BeginPassResult(**begun.model_dump())

    @activity.defn(name=c.FINISH_CAUGHT_UP)
    @domain_errors
    async def finish_caught_up(self, step: c.FinishCaughtUpInput) -> c.PassReport:
        report = await self._maintenance.finish_caught_up(step.host_id, step.epoch, step.now)
        return c.PassReport(**report.model_dump())

    @activity.defn(name=c.RECOVER)
    @domain_errors
    async def recover(self, step: c.PassStepInput) -> c.RecoverResult:
        repaired = await self._maintenance.recover(step.host_id, step.epoch)
        return c.RecoverResult(repaired=repaired)

    @activity.defn(name=c.SELECT_LANE)
    @domain_errors
    async def select_lane(self, step: c.SelectLaneInput) -> c.SelectLaneResult:
        picked = await self._maintenance.select_lane(step.host_id, step.epoch, step.now)
        return c.SelectLaneResult(thread_id=picked)

    @activity.defn(name=c.FINISH_PASS)
    @domain_errors
    async def finish_pass(self, step: c.FinishPassInput) -> c.PassReport:
        report = await self._maintenance.finish(
            step.host_id,
            step.epoch,
            generation=step.generation,
            stalls=step.stalls,
            progressed=step.progressed,
            now=step.now,
            jitter=step.jitter,
        )
        return c.PassReport(**report.model_dump())

    @activity.defn(name=c.REARM_FAILURE)
    @domain_errors
    async def rearm_failure(self, step: c.RearmFailureInput) -> c.PassReport:
        report = await self._maintenance.rearm_failure(
            step.host_id,
            step.epoch,
            generation=step.generation,
            native_only=step.native_only,
            now=step.now,
            jitter=step.jitter,
            error=step.error,
        )
        return c.PassReport(**report.model_dump())
