"""The auxiliary scope of a pass: work that shares the host's alarm besides the native attempt.

Started right after begin, beside the native work: message delivery (batches, each bounded by
its claims' own deadlines), the host plug-in's waves (bounded by its declared allowance) and one
projection backfill batch (bounded by the projection timeout). `finish` is the protocol's
``finishAuxiliary`` (docs/protocol.md, "The pass, step by step"): it closes admission of new
delivery batches and waves (the one running finishes; what is left stays due), joins the
running wave for at most `host_join_bound` and cancels it after that (not a failure), then joins
the rest; the first failure fails the pass, which by then has had its native opportunity.
`close` cancels whatever is left (the pass failed or hit its deadline).

Delivery batches and waves are cancelled with WAIT_CANCELLATION_COMPLETED, so the scope is
closed only once they are gone: a cut-off wave that swallows its cancellation holds the pass
until it ends, at most until its activity's start-to-close (``dispatch_until`` + `AUX_GRACE`),
and never overlaps the next pass's first wave.
"""

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityCancellationType

from threadwarden.workflows import auxiliary_contracts, contracts

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
AUX_HEARTBEAT = timedelta(seconds=10)
"""Heartbeat timeout of delivery and host waves: a dead worker is noticed this fast."""
AUX_GRACE = timedelta(seconds=10)
"""Start-to-close slack beyond each auxiliary activity's own bound."""
MIN_JOIN = timedelta(milliseconds=1)

Result = TypeVar("Result")


def host_join_bound(allowance_ms: int, dispatch_until: datetime, now: datetime) -> timedelta:
    """How long ``finishAuxiliary`` waits for the running wave: min(allowance,
    max(1 ms, dispatch_until − now))."""
    return min(timedelta(milliseconds=allowance_ms), max(dispatch_until - now, MIN_JOIN))


class AuxiliaryScope:
    """The auxiliary work of one pass, as concurrent activities."""

    def __init__(
        self, step: contracts.PassStepInput, plan: contracts.AuxiliaryPlan, dispatch_until: datetime
    ) -> None:
        self._step = step
        self._plan = plan
        self._dispatch_until = dispatch_until
        self._source_finished = False
        self._host: asyncio.Task[None] | None = None
        self._others: list[asyncio.Task[None]] = []
        self.host_timed_out = False

    def start(self) -> None:
        """Fork the due work; nothing here can fail the pass before its native opportunity."""
        if self._plan.host_waves or self._plan.host_work_due:
            self._host = self._fork(self._host_waves())
        if self._plan.messages_due:
            self._others.append(self._fork(self._deliver()))
        if self._plan.projection_due:
            self._others.append(self._fork(self._backfill()))

    @property
    def idle(self) -> bool:
        """Nothing was started beside the native work."""
        return self._host is None and not self._others

    async def finish(self) -> None:
        """Close admission of new waves and delivery batches, join the host bounded, join the
        rest; the first failure raises (after every task is done or cancelled)."""
        self._source_finished = True
        if self._host is not None and not self._host.done():
            allowance = self._plan.host_allowance_ms or 1
            bound = host_join_bound(allowance, self._dispatch_until, workflow.now())
            done, _ = await workflow.wait([self._host], timeout=bound.total_seconds())
            if not done:
                workflow.logger.info("host waves of %s cut off at their bound", self._step.host_id)
                self.host_timed_out = True
                await _cancelled(self._host)
                self._host = None
        for task in [*([self._host] if self._host else []), *self._others]:
            await task

    async def close(self) -> None:
        """Cancel every auxiliary task still running (the pass is over)."""
        for task in [*([self._host] if self._host else []), *self._others]:
            if not task.done():
                await _cancelled(task)

    @staticmethod
    def _fork(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.ensure_future(work)

    async def _host_waves(self) -> None:
        if self._plan.host_allowance_error is not None:
            raise ApplicationError(
                self._plan.host_allowance_error, type="HostAllowanceInvalid", non_retryable=True
            )
        # Without a plug-in (a mark of host work is due), one wave only takes the mark.
        allowance_ms = self._plan.host_allowance_ms or 1
        allowance = timedelta(milliseconds=allowance_ms)
        take = self._plan.host_work_due
        first = True
        # One initial wave always; further waves only while the native work runs.
        while first or not self._source_finished:
            if workflow.now() + allowance > self._dispatch_until:
                return  # the wave would not fit before dispatch_until
            first = False
            result = await self._batch(
                contracts.HOST_WAVE,
                auxiliary_contracts.HostWaveInput(
                    host_id=self._step.host_id,
                    dispatch_until=self._dispatch_until,
                    allowance_ms=allowance_ms,
                    take_host_work=take,
                ),
                auxiliary_contracts.HostWaveResult,
                at_least=allowance,
            )
            take = False
            if not result.more:
                return

    async def _deliver(self) -> None:
        # One batch always; further batches only while the native work runs. Messages left
        # due keep the host's alarm armed (the finish reads their deadline).
        first = True
        while first or not self._source_finished:
            if not first and workflow.now() >= self._dispatch_until:
                return
            first = False
            result = await self._batch(
                contracts.DELIVER_MESSAGES,
                auxiliary_contracts.DeliverInput(
                    host_id=self._step.host_id, dispatch_until=self._dispatch_until
                ),
                auxiliary_contracts.DeliverResult,
                at_least=MIN_JOIN,
            )
            if not result.more:
                return

    async def _batch(
        self, activity: str, arg: object, result_type: type[Result], *, at_least: timedelta
    ) -> Result:
        """One host wave or delivery batch: a single attempt, heartbeating, that may run until
        ``dispatch_until`` (at least ``at_least``) plus `AUX_GRACE`, and whose cancellation is
        waited for (the module's docstring)."""
        result = await workflow.execute_activity(
            activity,
            arg,
            result_type=result_type,
            start_to_close_timeout=max(self._dispatch_until - workflow.now(), at_least) + AUX_GRACE,
            heartbeat_timeout=AUX_HEARTBEAT,
            retry_policy=ONE_ATTEMPT,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"{activity} {self._step.host_id}",
        )
        return cast(Result, result)

    async def _backfill(self) -> None:
        await workflow.execute_local_activity(
            contracts.BACKFILL_PROJECTION,
            contracts.PassStepInput(host_id=self._step.host_id, epoch=self._step.epoch),
            result_type=auxiliary_contracts.BackfillResult,
            start_to_close_timeout=timedelta(milliseconds=self._plan.projection_timeout_ms)
            + AUX_GRACE,
            retry_policy=ONE_ATTEMPT,
            summary=f"backfill_projection {self._step.host_id}",
        )


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
