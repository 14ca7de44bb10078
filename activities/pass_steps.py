"""The pass steps shared by the begin step and the head activity: recovery with selection, the
binding-retry record and the native finish. Each is fenced by the pass epoch; the head activity
runs the last two itself when nothing else of its pass is running (one activity per unit)."""

import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from threadwarden.activities.auxiliary import host_deadline
from threadwarden.activities.pollers import HeadPollers
from threadwarden.activities.wake import Waker
from threadwarden.errors import StalePass
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.maintenance import HostView, Maintenance
from threadwarden.ledger.models import from_ms
from threadwarden.workflows import contracts as c

logger = logging.getLogger(__name__)


class PassSteps:
    """One instance per worker: the ledger's pass transactions with their failpoints."""

    def __init__(
        self,
        maintenance: Maintenance,
        *,
        failpoints: Failpoints,
        host: HostMaintenance | None,
        head_start_ms: int = 60_000,
        waker: Waker | None = None,
        pollers: HeadPollers | None = None,
        inline: Mapping[str, str] | None = None,
    ) -> None:
        self._inline = dict(inline or {})
        """The inline bindings this worker has: agent id → digest."""
        self._waker = waker
        self._pollers = pollers
        self._head_start_ms = head_start_ms
        self._maintenance = maintenance
        self._failpoints = failpoints
        self._host = host

    async def prepare_native(
        self, host_id: str, epoch: int, now: datetime, view: HostView | None = None
    ) -> c.NativePlan:
        """Recovery (only when some head is stalled), then round-robin selection, and whether
        any worker polls the selected head's task queue.

        ``view`` is what begin read; recovery changes the heads, so after it they are re-read.
        """
        repaired = 0
        if view is None or view.stalled:
            recovery = await self._maintenance.recover(host_id, epoch)
            repaired, view = recovery.repaired, None
            for parent_host in dict.fromkeys(recovery.parent_hosts):
                if self._waker is not None:  # a child recovery settled: its parent may go on
                    await self._waker.wake(parent_host, reason="child-settled")
        await self._failpoints.hit("maintenance:select:before")
        selection = await self._maintenance.select_lane(
            host_id, epoch, now, view, head_wait_ms=self._head_start_ms
        )
        await self._failpoints.hit("maintenance:select:after")
        unpolled = inline = False
        agent, pinned = selection.agent_id, selection.agent_digest
        if agent is not None and agent in self._inline:
            inline = pinned is None or pinned == self._inline[agent]
        if self._pollers is not None and agent is not None and not inline:
            unpolled = await self._pollers.unpolled(agent, pinned)
        return c.NativePlan(
            repaired=repaired, unpolled=unpolled, inline=inline, **selection.model_dump()
        )

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

    async def finish(self, step: c.FinishPassInput) -> c.PassReport:
        """Acknowledge the observed generation and set the alarm (brief §3.5 (e) 8–9)."""
        await self._failpoints.hit("maintenance:finish:before")
        now = clock(step.now)
        report = await self._maintenance.finish(
            step.host_id,
            step.epoch,
            generation=step.generation,
            stalls=step.stalls,
            progressed=step.progressed,
            now=now,
            jitter=step.jitter,
            extra_deadline=await host_deadline(self._host, step.host_id),
            selected=step.selected_submission_id,
            other_lanes_at=step.other_lanes_at,
        )
        await self._failpoints.hit("maintenance:finish:after")
        return c.PassReport(**report.model_dump(), reported_at=now)

    async def after_head(self, step: c.RunHeadInput, head: c.RunHeadResult) -> c.RunHeadResult:
        """Brief §3.5 (e) after the head attempt (or after no worker started it): the
        binding-retry record, then (folded) the native finish. A failure here fails the pass
        after the attempt (reported, never raised: the attempt's outcome is already
        committed)."""
        if head.binding_error is not None or step.binding_retry_pending:
            try:
                await self.record_binding_result(
                    step.host_id,
                    step.epoch,
                    thread_id=step.thread_id,
                    submission_id=head.submission_id or step.submission_id,
                    error=head.binding_error,
                    now=datetime.now(UTC),
                )
            except StalePass:
                raise
            except Exception as error:
                head.failure, head.native_failure = _describe(error), True
                return head
        if step.finish is None:
            return head
        try:
            head.report = await self.finish(
                c.FinishPassInput(
                    host_id=step.host_id,
                    epoch=step.epoch,
                    generation=step.finish.generation,
                    stalls=step.finish.stalls,
                    progressed=head.outcome is not None or step.repaired > 0,
                    now=datetime.now(UTC),
                    jitter=step.finish.jitter,
                    selected_submission_id=step.submission_id,
                    other_lanes_at=step.finish.other_lanes_at,
                )
            )
        except StalePass:
            raise
        except Exception as error:
            head.failure = _describe(error)
        return head


def clock(now: datetime) -> datetime:
    """The later of the workflow's ``now`` and this worker's clock. A workflow's clock stands
    still inside one workflow task, and several passes may run in one (their steps are local
    activities); a time-skipping test server runs ahead of the wall clock."""
    return max(now, datetime.now(UTC))


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]
