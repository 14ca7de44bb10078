"""One maintenance pass, as the host workflow runs it: the steps, their order and time bounds.

Every step is an activity with an explicit timeout and a single attempt; the protocol's durable
backoff (``rearm_failure``) governs retries. The pass deadline cancels the pass cooperatively: the
head attempt is cancelled (and releases its claim) before the failure is recorded.
"""

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError
from temporalio.workflow import ActivityCancellationType

from workflows import contracts as c
from workflows.auxiliary import AuxiliaryScope

T = TypeVar("T")

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
SHORT_STEP = timedelta(seconds=30)
LEGACY_PASS_DEADLINE = timedelta(minutes=14)
LEGACY_YIELD_AFTER = timedelta(minutes=10)
HEAD_HEARTBEAT = timedelta(seconds=30)
HEAD_CANCEL_GRACE = timedelta(seconds=60)
"""The head activity outlives the pass deadline by this much, so that the deadline's
cancellation (not a server timeout) ends it and it can release its claim first."""
PASS_DEADLINE_ERROR = "maintenance pass deadline"


STEP_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)
"""How a failed step surfaces: regular activities raise ActivityError (the cause inside), local
activities raise the ApplicationError (or TimeoutError) itself."""


def _cause(error: FailureError) -> FailureError | BaseException:
    return error.cause if isinstance(error, ActivityError) and error.cause else error


class PassDeadline(Exception):
    """The pass ran past its deadline and was cancelled."""


class MaintenancePass:
    """Runs one pass of ``host_id``; ``bounded`` enables the pass deadline and binding retries,
    ``auxiliary`` the concurrent auxiliary scope and the publication gate.

    Histories recorded before those existed replay with them off.
    """

    def __init__(self, host_id: str, *, bounded: bool, auxiliary: bool = False) -> None:
        self._host_id = host_id
        self._bounded = bounded
        self._auxiliary = auxiliary
        self._native_only = False

    async def run(self) -> c.PassReport | None:
        """Begin, then the caught-up or native path; on any failure, the durable rearm."""
        started = workflow.now()
        try:
            begin = await _step(
                c.BEGIN_PASS,
                c.BeginPassInput(host_id=self._host_id, now=started),
                c.BeginPassResult,
            )
        except STEP_FAILURES as error:
            # No generation was observed, so there is nothing to rearm: begin's own pre-arm
            # (or the mutation's) and the sweeper converge the host.
            workflow.logger.warning("begin failed on host %s: %s", self._host_id, _cause(error))
            return None
        step = c.PassStepInput(host_id=self._host_id, epoch=begin.epoch)
        try:
            if not self._bounded:
                return await self._body(step, begin, started)
            return await self._within_deadline(step, begin, started)
        except STEP_FAILURES as error:
            cause = _cause(error)
            if isinstance(cause, ApplicationError) and cause.type == "StalePass":
                workflow.logger.warning("pass on %s superseded: %s", self._host_id, cause)
                return None
            return await self._rearm(step, begin, str(cause))
        except PassDeadline:
            return await self._rearm(step, begin, PASS_DEADLINE_ERROR)

    async def _within_deadline(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime
    ) -> c.PassReport:
        deadline = started + timedelta(milliseconds=begin.pass_deadline_ms)
        body = asyncio.ensure_future(self._body(step, begin, started))
        remaining = max(deadline - workflow.now(), timedelta(milliseconds=1))
        done, _ = await workflow.wait([body], timeout=remaining.total_seconds())
        if body in done:
            return body.result()
        workflow.logger.warning("pass on %s hit its deadline; cancelling", self._host_id)
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError, *STEP_FAILURES):
            await body
        raise PassDeadline()

    async def _body(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime
    ) -> c.PassReport:
        if self._auxiliary and begin.auxiliary is not None:
            return await self._scoped_body(step, begin, begin.auxiliary, started)
        if begin.caught_up:
            return await _finish_caught_up(step, begin, auxiliary_done=False)
        self._native_only = True
        progressed = await self._native(step, begin, started)
        self._native_only = False
        return await _finish_native(step, begin, progressed, auxiliary_done=False)

    async def _scoped_body(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        plan: c.AuxiliaryPlan,
        started: datetime,
    ) -> c.PassReport:
        """Brief §3.5 (b)–(e): auxiliary work beside the native work, the publication gate,
        then the caught-up (or publication-blocked) finish or the native path."""
        scope = AuxiliaryScope(step, plan, started + timedelta(milliseconds=begin.pass_deadline_ms))
        scope.start()
        try:
            blocked = False
            due = plan.publication_due
            # Drain when actionable or a retry is due (an empty outbox has nothing to drain).
            drain_due = plan.publication_drain_due
            if drain_due is None:  # a begin from an older worker
                drain_due = due is not None and due <= workflow.now()
            if due is not None and (not begin.caught_up or drain_due):
                publication = await _step(c.DRAIN_PUBLICATIONS, step, c.PublicationResult)
                blocked = publication.pending is not None
            if begin.caught_up or blocked:
                await scope.finish()
                report = await _finish_caught_up(step, begin, auxiliary_done=True)
            else:
                self._native_only = True
                progressed = await self._native(step, begin, started)
                self._native_only = False
                await scope.finish()
                report = await _finish_native(step, begin, progressed, auxiliary_done=True)
        except (Exception, asyncio.CancelledError):
            # The pass failed or hit its deadline: the scope closes before the failure rearm.
            # (Not on GeneratorExit: an evicted workflow must not await.)
            await scope.close()
            raise
        report.host_timed_out = scope.host_timed_out
        return report

    async def _native(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime
    ) -> bool:
        """Recovery, then one head attempt on the selected lane. True when something progressed."""
        recovered = await _step(c.RECOVER, step, c.RecoverResult)
        selected = await _step(
            c.SELECT_LANE,
            c.SelectLaneInput(**step.model_dump(), now=workflow.now()),
            c.SelectLaneResult,
        )
        if selected.thread_id is None:
            return recovered.repaired > 0
        head = await self._run_head(step, begin, started, selected.thread_id)
        if self._bounded and (head.binding_error is not None or selected.binding_retry_pending):
            submission_id = head.submission_id or selected.submission_id
            assert submission_id is not None
            await _step(
                c.RECORD_BINDING_RESULT,
                c.BindingResultInput(
                    **step.model_dump(),
                    thread_id=selected.thread_id,
                    submission_id=submission_id,
                    failed=head.binding_error is not None,
                    error=head.binding_error,
                    now=workflow.now(),
                ),
                c.BindingResultResult,
            )
        return head.outcome is not None or recovered.repaired > 0

    async def _run_head(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime, thread_id: str
    ) -> c.RunHeadResult:
        if self._bounded:
            yield_after = started + timedelta(milliseconds=begin.yield_after_ms)
            timeout = timedelta(milliseconds=begin.pass_deadline_ms) + HEAD_CANCEL_GRACE
            heartbeat = timedelta(milliseconds=begin.head_heartbeat_ms)
        else:
            yield_after, timeout = workflow.now() + LEGACY_YIELD_AFTER, LEGACY_PASS_DEADLINE
            heartbeat = HEAD_HEARTBEAT
        result = await workflow.execute_activity(
            c.RUN_HEAD,
            c.RunHeadInput(**step.model_dump(), thread_id=thread_id, yield_after=yield_after),
            result_type=c.RunHeadResult,
            start_to_close_timeout=timeout,
            heartbeat_timeout=heartbeat,
            retry_policy=ONE_ATTEMPT,
            # On the pass deadline, wait until the attempt has released its claim.
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return cast(c.RunHeadResult, result)

    async def _rearm(
        self, step: c.PassStepInput, begin: c.BeginPassResult, message: str
    ) -> c.PassReport | None:
        workflow.logger.warning("pass failed on host %s: %s", self._host_id, message)
        try:
            return await _step(
                c.REARM_FAILURE,
                c.RearmFailureInput(
                    **step.model_dump(),
                    generation=begin.generation,
                    native_only=self._native_only,
                    now=workflow.now(),
                    jitter=workflow.random().random(),
                    error=message[:500],
                ),
                c.PassReport,
            )
        except STEP_FAILURES as rearm_error:
            workflow.logger.warning("failure rearm failed on %s: %s", self._host_id, rearm_error)
            return None


async def _finish_caught_up(
    step: c.PassStepInput, begin: c.BeginPassResult, *, auxiliary_done: bool
) -> c.PassReport:
    return await _step(
        c.FINISH_CAUGHT_UP,
        c.FinishCaughtUpInput(
            **step.model_dump(),
            now=workflow.now(),
            generation=begin.generation,
            auxiliary_done=auxiliary_done,
        ),
        c.PassReport,
    )


async def _finish_native(
    step: c.PassStepInput, begin: c.BeginPassResult, progressed: bool, *, auxiliary_done: bool
) -> c.PassReport:
    return await _step(
        c.FINISH_PASS,
        c.FinishPassInput(
            **step.model_dump(),
            auxiliary_done=auxiliary_done,
            generation=begin.generation,
            stalls=begin.stalls,
            progressed=progressed,
            now=workflow.now(),
            jitter=workflow.random().random(),
        ),
        c.PassReport,
    )


async def _step(name: str, arg: object, result_type: type[T]) -> T:
    result = await workflow.execute_local_activity(
        name,
        arg,
        result_type=result_type,
        start_to_close_timeout=SHORT_STEP,
        retry_policy=ONE_ATTEMPT,
    )
    return cast(T, result)
