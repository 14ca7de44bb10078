"""One maintenance pass, as the host workflow runs it: the steps, their order and time bounds.

Every step is an activity with an explicit timeout and a single attempt; the protocol's durable
backoff (``rearm_failure``) governs retries. The common pass is ``begin_pass`` (a local
activity: begin, recovery when needed, lane selection) and the head attempt (with its
binding-retry record and, when no auxiliary work runs beside it, the finish): run by
``begin_pass`` itself for an inline binding this worker has when nothing else is due (one step
per pass), else ``run_head``, a local activity for such a binding, an activity on the agent's
task queue for any other. The pass
deadline cancels the pass cooperatively: the head attempt is cancelled (and releases its claim)
before the failure is recorded.
"""

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, TimeoutType
from temporalio.exceptions import TimeoutError as TemporalTimeoutError
from temporalio.workflow import ActivityCancellationType

from threadwarden.workflows import contracts as c
from threadwarden.workflows.auxiliary import AuxiliaryScope

T = TypeVar("T")

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
SHORT_STEP = timedelta(seconds=30)
"""Start-to-close of a local pass step: one or two short transactions."""
BEGIN_BOUND = timedelta(milliseconds=3_600_000) + timedelta(seconds=60)
"""Start-to-close of ``begin_pass``: it may run an inline head to the end of its pass (the
longest pass deadline the settings allow, plus the head's cancel grace); begin's own work is
bounded to 30 s inside the activity."""
STEP_QUEUE = timedelta(seconds=30)
"""How long a local step may wait for a local-activity slot before the pass fails (queueing
is bounded apart from running)."""
HEAD_CANCEL_GRACE = timedelta(seconds=60)
"""The head activity outlives the pass deadline by this much, so that the deadline's
cancellation (not a server timeout) ends it and it can release its claim first."""


STEP_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)
"""How a failed step surfaces: regular activities raise ActivityError (the cause inside), local
activities raise the ApplicationError (or TimeoutError) itself."""


def _cause(error: FailureError) -> FailureError | BaseException:
    return error.cause if isinstance(error, ActivityError) and error.cause else error


class PassDeadline(Exception):
    """The pass ran past its deadline and was cancelled."""


class WorkerStopping(RuntimeError):
    """The worker running this workflow task stops: the task fails (an error that is not a
    Temporal failure fails the task, not the workflow), so no further local step starts on it
    and another worker takes the task over from its last recorded step."""


class PassFailed(Exception):
    """A step reported a failure after begin committed (the pass rearms with it)."""


class MaintenancePass:
    """Runs one pass of ``host_id``."""

    def __init__(
        self,
        host_id: str,
        on_head: Callable[[c.NativePlan], None] | None = None,
        *,
        heads_known: bool = True,
    ) -> None:
        self._host_id = host_id
        self._heads_known = heads_known
        """The run already shows the lane heads (else a caught-up finish reads them)."""
        self._on_head = on_head
        """Told of the head about to run (the host workflow shows it in the Temporal UI)."""
        self._native_only = False

    async def run(self) -> c.PassReport | None:
        """Begin, then the caught-up or native path; on any failure, the durable rearm."""
        started = workflow.now()
        try:
            begin = await _step(
                c.BEGIN_PASS,
                c.BeginPassInput(host_id=self._host_id, now=started),
                c.BeginPassResult,
                self._host_id,
                start_to_close=BEGIN_BOUND,
            )
        except STEP_FAILURES as error:
            if isinstance(error, ApplicationError) and error.type == c.WORKER_SHUTDOWN:
                raise WorkerStopping(str(error)) from None
            # Begin did not commit (a failure after its commit is reported in its result), so
            # no generation was observed and there is nothing to rearm: the mutation's
            # pre-arm and the sweeper converge the host.
            workflow.logger.warning("begin failed on host %s: %s", self._host_id, _cause(error))
            return None
        step = c.PassStepInput(host_id=self._host_id, epoch=begin.epoch)
        # Begin's clock: the workflow's stands still while passes follow each other inside one
        # workflow task (their steps being local activities).
        started = max(started, begin.begun_at or started)
        if begin.error is not None:  # after begin's commit: the observed generation rearms
            return await self._rearm(step, begin, begin.error)
        try:
            return await self._within_deadline(step, begin, started)
        except STEP_FAILURES as error:
            cause = _cause(error)
            if isinstance(cause, ApplicationError) and cause.type == "StalePass":
                workflow.logger.info("pass on %s superseded: %s", self._host_id, cause)
                return None
            return await self._rearm(step, begin, str(cause))
        except PassFailed as failure:
            return await self._rearm(step, begin, str(failure))
        except PassDeadline:
            return await self._rearm(step, begin, c.PASS_DEADLINE_ERROR)

    async def _within_deadline(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime
    ) -> c.PassReport:
        """The body, cancelled at the pass deadline. When no auxiliary work runs beside the
        native work the head activity keeps the deadline itself (a timer per pass is two
        history events); otherwise a workflow timer does."""
        if AuxiliaryScope.none_due(begin.auxiliary):
            return await self._body(step, begin, started)
        deadline = started + timedelta(milliseconds=begin.pass_deadline_ms)
        body = asyncio.ensure_future(self._body(step, begin, started))
        remaining = max(deadline - workflow.now(), timedelta(milliseconds=1))
        done, _ = await workflow.wait([body], timeout=remaining.total_seconds())
        if body in done:
            return body.result()
        workflow.logger.warning("pass on %s hit its deadline; cancelling", self._host_id)
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError, PassFailed, *STEP_FAILURES):
            await body
        raise PassDeadline()

    async def _body(
        self, step: c.PassStepInput, begin: c.BeginPassResult, started: datetime
    ) -> c.PassReport:
        """Brief §3.5 (b)–(e): auxiliary work beside the native work, the publication gate,
        then the caught-up (or publication-blocked) finish or the native path."""
        plan = begin.auxiliary
        scope = AuxiliaryScope(step, plan, started + timedelta(milliseconds=begin.pass_deadline_ms))
        scope.start()
        try:
            blocked = False
            # Drain when actionable or a retry is due (an empty outbox has nothing to drain).
            if plan.publication_due is not None and (
                not begin.caught_up or plan.publication_drain_due
            ):
                publication = await _step(
                    c.DRAIN_PUBLICATIONS, step, c.PublicationResult, self._host_id
                )
                blocked = publication.pending is not None
            if begin.caught_up or blocked:
                await scope.finish()
                report = await _step(
                    c.FINISH_CAUGHT_UP,
                    c.FinishCaughtUpInput(
                        **step.model_dump(),
                        now=workflow.now(),
                        generation=begin.generation,
                        heads=not self._heads_known and begin.nonterminal > 0,
                    ),
                    c.PassReport,
                    self._host_id,
                )
            else:
                report = await self._native(step, begin, started, scope)
        except (Exception, asyncio.CancelledError):
            # The pass failed or hit its deadline: the scope closes before the failure rearm.
            # (Not on GeneratorExit: an evicted workflow must not await.)
            await scope.close()
            raise
        report.host_timed_out = scope.host_timed_out
        return report

    async def _native(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        started: datetime,
        scope: AuxiliaryScope,
    ) -> c.PassReport:
        """Recovery and selection (done by begin unless the gate held them), one head attempt
        on the selected lane, then finishAuxiliary and the native finish."""
        self._native_only = True
        native = begin.native
        if native is None:
            native = await _step(
                c.PREPARE_NATIVE,
                c.PrepareNativeInput(**step.model_dump(), now=workflow.now()),
                c.NativePlan,
                self._host_id,
            )
        if native.error is not None:
            raise PassFailed(native.error)
        if native.thread_id is None:
            progressed = native.repaired > 0
        else:
            assert native.submission_id is not None
            # Nothing runs beside the attempt: it finishes the pass itself (one activity).
            folded = scope.idle
            if self._on_head is not None:
                self._on_head(native)
            # An inline head: begin ran it when nothing else of the pass was due (one step
            # per pass), else it runs here as a local activity of its own.
            head = begin.head
            if head is None and native.inline:
                head = await self._run_inline_head(step, begin, started, native, fold=folded)
            elif head is None and not native.unpolled:  # else no poller: binding-unavailable
                head = await self._run_head(step, begin, started, native, fold=folded)
            if head is None:  # no worker with the binding started it: binding-unavailable
                head = await self._head_unstarted(step, begin, started, native, fold=folded)
            if head.failure is not None:
                self._native_only = head.native_failure
                raise PassFailed(head.failure)
            if head.report is not None:
                self._native_only = False
                return head.report
            progressed = head.outcome is not None or native.repaired > 0
        self._native_only = False
        await scope.finish()
        return await _step(
            c.FINISH_PASS,
            c.FinishPassInput(
                **step.model_dump(),
                generation=begin.generation,
                stalls=begin.stalls,
                progressed=progressed,
                now=workflow.now(),
                jitter=workflow.random().random(),
                selected_submission_id=native.submission_id,
                other_lanes_at=native.other_lanes_at,
            ),
            c.PassReport,
            self._host_id,
        )

    def _head_input(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        started: datetime,
        native: c.NativePlan,
        *,
        fold: bool,
    ) -> c.RunHeadInput:
        assert native.thread_id is not None and native.submission_id is not None
        finish = None
        if fold:
            finish = c.FinishPlan(
                generation=begin.generation,
                stalls=begin.stalls,
                jitter=workflow.random().random(),
                other_lanes_at=native.other_lanes_at,
            )
        return c.RunHeadInput(
            **step.model_dump(),
            thread_id=native.thread_id,
            submission_id=native.submission_id,
            binding_retry_pending=native.binding_retry_pending,
            repaired=native.repaired,
            yield_after=started + timedelta(milliseconds=begin.yield_after_ms),
            pass_deadline=started + timedelta(milliseconds=begin.pass_deadline_ms),
            finish=finish,
        )

    async def _run_head(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        started: datetime,
        native: c.NativePlan,
        *,
        fold: bool,
    ) -> c.RunHeadResult | None:
        """The head attempt, on its agent's task queue (only workers with that binding poll
        it). None when none of them started it within ``head_start_ms``."""
        assert native.agent_id is not None
        try:
            result = await workflow.execute_activity(
                c.RUN_HEAD,
                self._head_input(step, begin, started, native, fold=fold),
                result_type=c.RunHeadResult,
                task_queue=c.head_task_queue(
                    workflow.info().task_queue, native.agent_id, native.agent_digest
                ),
                schedule_to_start_timeout=timedelta(milliseconds=begin.head_start_ms),
                start_to_close_timeout=timedelta(milliseconds=begin.pass_deadline_ms)
                + HEAD_CANCEL_GRACE,
                heartbeat_timeout=timedelta(milliseconds=begin.head_heartbeat_ms),
                retry_policy=ONE_ATTEMPT,
                # On the pass deadline, wait until the attempt has released its claim.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"{c.RUN_HEAD} {_head_subject(native)}",
            )
        except ActivityError as error:
            cause = error.cause
            if (
                isinstance(cause, TemporalTimeoutError)
                and cause.type == TimeoutType.SCHEDULE_TO_START
            ):
                return None
            raise
        return cast(c.RunHeadResult, result)

    async def _run_inline_head(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        started: datetime,
        native: c.NativePlan,
        *,
        fold: bool,
    ) -> c.RunHeadResult:
        """The head attempt as a local activity, on the worker that prepared the pass (it has
        the binding): no activity task to dispatch, and the next pass may follow inside the
        same workflow task. Should another worker replay the pass without the binding, the
        attempt finds none and the head backs off as binding-unavailable."""
        try:
            result = await workflow.execute_local_activity(
                c.RUN_HEAD,
                self._head_input(step, begin, started, native, fold=fold),
                result_type=c.RunHeadResult,
                schedule_to_start_timeout=STEP_QUEUE,
                start_to_close_timeout=timedelta(milliseconds=begin.pass_deadline_ms)
                + HEAD_CANCEL_GRACE,
                retry_policy=ONE_ATTEMPT,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"{c.RUN_HEAD} {_head_subject(native)}",
            )
        except ApplicationError as error:
            if error.type == c.WORKER_SHUTDOWN:  # fail this workflow task, not the pass
                raise WorkerStopping(str(error)) from None
            raise
        return cast(c.RunHeadResult, result)

    async def _head_unstarted(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        started: datetime,
        native: c.NativePlan,
        *,
        fold: bool,
    ) -> c.RunHeadResult:
        """Record the unstarted head as binding-unavailable (a binding retry), then (folded)
        finish: the same record an attempt on a worker without the binding would make."""
        pinned = f" at digest {native.agent_digest}" if native.agent_digest else ""
        waited = (
            "polls its task queue"
            if native.unpolled
            else f"started the head within {begin.head_start_ms} ms"
        )
        error = (
            f"agent {native.agent_id}: no worker with its binding{pinned} {waited}"
            f" (submission {native.submission_id} stays pending)"
        )
        return await _step(
            c.HEAD_UNSTARTED,
            c.HeadUnstartedInput(
                head=self._head_input(step, begin, started, native, fold=fold), error=error
            ),
            c.RunHeadResult,
            _head_subject(native),
        )

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
                self._host_id,
            )
        except STEP_FAILURES as rearm_error:
            workflow.logger.warning("failure rearm failed on %s: %s", self._host_id, rearm_error)
            return None


def _head_subject(native: c.NativePlan) -> str:
    """``sub_… on support-42 (agent helper)``: what a head step works on, for its summary."""
    pinned = f" at {native.agent_digest}" if native.agent_digest else ""
    return f"{native.submission_id} on {native.thread_id} (agent {native.agent_id}{pinned})"


async def _step(
    name: str,
    arg: object,
    result_type: type[T],
    subject: str,
    *,
    start_to_close: timedelta = SHORT_STEP,
) -> T:
    """A local pass step; its summary (shown in the Temporal UI) names the step and subject."""
    result = await workflow.execute_local_activity(
        name,
        arg,
        result_type=result_type,
        schedule_to_start_timeout=STEP_QUEUE,
        start_to_close_timeout=start_to_close,
        retry_policy=ONE_ATTEMPT,
        summary=f"{name} {subject}",
    )
    return cast(T, result)
