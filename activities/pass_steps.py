"""The pass steps shared by the begin step and the head activity: recovery with selection, the
binding-retry record and the native finish. Each is fenced by the pass epoch; the head activity
runs the last two itself when nothing else of its pass is running (one activity per unit)."""

import logging
from datetime import datetime

from threadwarden.activities.auxiliary import host_deadline
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.maintenance import HostView, Maintenance
from threadwarden.ledger.models import from_ms
from threadwarden.workflows import contracts as c

logger = logging.getLogger(__name__)


class PassSteps:
    """One instance per worker: the ledger's pass transactions with their failpoints."""

    def __init__(
        self, maintenance: Maintenance, *, failpoints: Failpoints, host: HostMaintenance | None
    ) -> None:
        self._maintenance = maintenance
        self._failpoints = failpoints
        self._host = host

    async def prepare_native(
        self, host_id: str, epoch: int, now: datetime, view: HostView | None = None
    ) -> c.NativePlan:
        """Recovery (only when some head is stalled), then round-robin selection.

        ``view`` is what begin read; recovery changes the heads, so after it they are re-read.
        """
        repaired = 0
        if view is None or view.stalled:
            repaired = (await self._maintenance.recover(host_id, epoch)).repaired
            view = None
        await self._failpoints.hit("maintenance:select:before")
        selection = await self._maintenance.select_lane(host_id, epoch, now, view)
        await self._failpoints.hit("maintenance:select:after")
        return c.NativePlan(repaired=repaired, **selection.model_dump())

    async def record_binding_result(
        self,
        host_id: str,
        epoch: int,
        *,
        thread_id: str,
        submission_id: str,
        error: str | None,
        now: datetime,
    ) -> None:
        """Back the head off while its binding is missing; a success removes its entry."""
        await self._failpoints.hit("maintenance:binding-retry:before")
        entry, report = await self._maintenance.record_binding_result(
            host_id,
            epoch,
            thread_id=thread_id,
            submission_id=submission_id,
            failed=error is not None,
            now=now,
        )
        await self._failpoints.hit("maintenance:binding-retry:after")
        if entry is not None:
            log = logger.error if report else logger.debug
            log(
                "submission %s awaits a compatible binding; original work remains pending"
                " (attempt %d, next at %s): %s",
                submission_id,
                entry.attempts,
                from_ms(entry.not_before).isoformat(),
                error,
            )

    async def finish(self, step: c.FinishPassInput) -> c.PassReport:
        """Acknowledge the observed generation and set the alarm (brief §3.5 (e) 8–9)."""
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
            selected=step.selected_submission_id,
            other_lanes_at=step.other_lanes_at,
        )
        await self._failpoints.hit("maintenance:finish:after")
        return c.PassReport(**report.model_dump())
