"""One maintenance pass, as the host workflow runs it: the steps, their order and time bounds.

Every step is an activity with an explicit timeout and a single attempt; the protocol's durable
backoff (``rearm_failure``) governs retries. ``begin_pass`` (a local activity: begin, recovery
when needed, lane selection) decides the pass's route once (`contracts.Route`); this module
follows it: the caught-up finish, the publication gate, or the head attempt (run by begin
itself, as a local ``run_head`` here, or as ``run_head`` on the agent's task queue) and the
native finish, with the auxiliary work beside. The pass deadline cancels the pass
cooperatively: the head attempt is cancelled (and releases its claim) before the failure is
recorded. A head whose worker shuts down ends the pass without a rearm (`stopped`).
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

from threadwarden.workflows import auxiliary_contracts, contracts
from threadwarden.workflows.auxiliary import AuxiliaryScope

T = TypeVar("T")

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
SHORT_STEP = timedelta(seconds=30)
"""Start-to-close of a local pass step: one or two short transactions."""
BEGIN_BOUND = timedelta(seconds=90)
"""Start-to-close of ``begin_pass``: its own part (30 s), then an inline head it may run (at most
its hard bound of 30 s, `activities/pass_steps.py` ``INLINE_HARD_BOUND_MS``, then the head's
binding-retry record and finish)."""
STEP_QUEUE = timedelta(seconds=30)
"""How long a local step may wait for a local-activity slot before the pass fails (queueing
is bounded apart from running)."""
HEAD_CANCEL_GRACE = timedelta(seconds=60)
"""A dispatched head outlives the pass deadline by this much, so that the deadline's
cancellation (not a server timeout) ends it and it can release its claim first."""


STEP_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)
"""How a failed step surfaces: regular activities raise ActivityError (the cause inside), local
activities raise the ApplicationError (or TimeoutError) itself."""


def _cause(error: FailureError) -> FailureError | BaseException:
    return error.cause if isinstance(error, ActivityError) and error.cause else error


class PassDeadline(Exception):
    """The pass ran past its deadline and was cancelled."""


class PassStopped(Exception):
    """The head ran on a worker that is shutting down and gave its head back: the pass ends
    without a rearm (begin's pre-arm keeps the host due) and the next pass runs elsewhere."""


class PassFailed(Exception):
    """A step reported a failure after begin committed (the pass rearms with it)."""

    def __init__(self, error: str, *, native: bool) -> None:
        super().__init__(error)
        self.native = native
        """The failure belongs to the native work alone (``native_only`` of the retry)."""


class MaintenancePass:
    """Runs one pass of ``host_id``."""

    def __init__(
        self,
        host_id: str,
        on_head: Callable[[contracts.RunHeadInput], None] | None = None,
        *,
        heads_known: bool = True,
    ) -> None:
        self._host_id = host_id
        self._heads_known = heads_known
        """The run already shows the lane heads (else a caught-up finish reads them)."""
        self._on_head = on_head
        """Told of the head about to run (the host workflow shows it in the Temporal UI)."""
        self._native_only = False
        self.stopped = False
        """The pass ended because its head's worker is shutting down (`PassStopped`)."""
        self.started: datetime | None = None
        """Begin's clock (None: begin failed)."""
        self.idle_linger = timedelta(0)
        """How long the run waits for a wake if this pass leaves its host idle (begin's)."""
        self.moved = False
        """A mutation committed while the pass ran (its host's generation moved past what
        begin observed): an admission that skipped its wake because this pass's alarm was as
        early. The run goes straight on, as a wake would have made it."""

    async def run(self) -> contracts.PassReport | None:
        """Begin, then its route; on any failure, the durable rearm."""
        started = workflow.now()
        try:
            begin = await _step(
                contracts.BEGIN_PASS,
                contracts.BeginPassInput(host_id=self._host_id, now=started),
                contracts.BeginPassResult,
                self._host_id,
                start_to_close=BEGIN_BOUND,
            )
        except STEP_FAILURES as error:
            # Raised before begin's commit, when superseded, or past the step's bound (an
            # inline head it ran gave its claim back when cancelled): no generation to rearm
            # with; begin's pre-arm and the sweeper converge the host.
            workflow.logger.warning("begin failed on host %s: %s", self._host_id, _cause(error))
            return None
        step = contracts.PassStepInput(host_id=self._host_id, epoch=begin.epoch)
        # Begin's clock: the workflow's stands still while passes follow each other inside one
        # workflow task (their steps being local activities).
        started = self.started = max(started, begin.begun_at)
        self.idle_linger = timedelta(milliseconds=begin.idle_linger_ms)
        try:
            if isinstance(begin.route, contracts.RanHere):  # begin ran the head and the finish
                report = self._concluded(begin.route.result)
            elif isinstance(begin.route, contracts.BeginFailed):
                raise PassFailed(begin.route.error, native=begin.route.native)
            elif isinstance(begin.route, contracts.Stopping):
                raise PassStopped()
            else:
                report = await self._within_deadline(step, begin, started)
            self.moved = (
                report is not None
                and report.outcome != "failed"  # a failed pass keeps its backoff
                and report.generation != begin.generation
            )
            return report
        except PassStopped:
            workflow.logger.info("pass on %s stopped with its worker", self._host_id)
            self.stopped = True
            return None
        except STEP_FAILURES as error:
            cause = _cause(error)
            if isinstance(cause, ApplicationError) and cause.type == "StalePass":
                workflow.logger.info("pass on %s superseded: %s", self._host_id, cause)
                return None
            return await self._rearm(step, begin, str(cause), native=self._native_only)
        except PassFailed as failure:
            return await self._rearm(step, begin, str(failure), native=failure.native)
        except PassDeadline:
            return await self._rearm(
                step, begin, contracts.PASS_DEADLINE_ERROR, native=self._native_only
            )

    async def _within_deadline(
        self, step: contracts.PassStepInput, begin: contracts.BeginPassResult, started: datetime
    ) -> contracts.PassReport:
        """The body, cancelled at the pass deadline. When no auxiliary work runs beside the
        native work the head activity keeps the deadline itself (a timer per pass is two
        history events); otherwise a workflow timer does."""
        if begin.auxiliary.nothing_beside:
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
        self, step: contracts.PassStepInput, begin: contracts.BeginPassResult, started: datetime
    ) -> contracts.PassReport:
        """Brief §3.5 (b)–(e): auxiliary work beside the native work, the publication gate,
        then the caught-up (or publication-blocked) finish or the native path."""
        plan, route = begin.auxiliary, begin.route
        scope = AuxiliaryScope(step, plan, started + timedelta(milliseconds=begin.pass_deadline_ms))
        scope.start()
        try:
            # Drain when actionable or a retry is due (an empty outbox has nothing to drain).
            if plan.publication_due is not None and (
                not isinstance(route, contracts.CaughtUp) or plan.publication_drain_due
            ):
                publication = await _step(
                    contracts.DRAIN_PUBLICATIONS,
                    step,
                    auxiliary_contracts.PublicationResult,
                    self._host_id,
                )
                if isinstance(route, contracts.Held) and publication.pending is None:
                    route = await self._prepare(step, begin, started, folded=scope.idle)
            if isinstance(
                route, (contracts.CaughtUp, contracts.Held)
            ):  # caught up, or held by the gate
                await scope.finish()
                report = await _step(
                    contracts.FINISH_CAUGHT_UP,
                    contracts.FinishCaughtUpInput(
                        **step.model_dump(),
                        now=workflow.now(),
                        generation=begin.generation,
                        heads=not self._heads_known and begin.nonterminal > 0,
                    ),
                    contracts.PassReport,
                    self._host_id,
                )
            else:
                report = await self._native(step, begin, route, scope)
        except (Exception, asyncio.CancelledError):
            # The pass failed, hit its deadline or stopped: the scope closes first. (Not on
            # GeneratorExit: an evicted workflow must not await.)
            await scope.close()
            raise
        report.host_timed_out = scope.host_timed_out
        return report

    async def _prepare(
        self,
        step: contracts.PassStepInput,
        begin: contracts.BeginPassResult,
        started: datetime,
        *,
        folded: bool,
    ) -> contracts.Route:
        """Recovery, selection and the head's route, after the publication gate let them."""
        prepared = await _step(
            contracts.PREPARE_NATIVE,
            contracts.PrepareNativeInput(
                **step.model_dump(),
                now=workflow.now(),
                begun_at=started,
                generation=begin.generation,
                stalls=begin.stalls,
                folded=folded,
            ),
            contracts.Prepared,
            self._host_id,
        )
        return prepared.route

    async def _native(
        self,
        step: contracts.PassStepInput,
        begin: contracts.BeginPassResult,
        route: contracts.Route,
        scope: AuxiliaryScope,
    ) -> contracts.PassReport:
        """One head attempt on the selected lane (when one is runnable), then
        finishAuxiliary and the native finish (unless the attempt finished the pass)."""
        self._native_only = True
        if isinstance(route, contracts.BeginFailed):
            raise PassFailed(route.error, native=True)
        if isinstance(route, contracts.Stopping):
            raise PassStopped()
        selected, other_lanes_at, progressed = None, None, False
        if isinstance(route, contracts.Idle):
            other_lanes_at, progressed = route.other_lanes_at, route.repaired > 0
        elif isinstance(route, (contracts.RunHere, contracts.Dispatch, contracts.NoPoller)):
            head = route.head
            if self._on_head is not None:
                self._on_head(head)
            result = await self._attempt(route, begin)
            report = self._concluded(result)
            if report is not None:
                self._native_only = False
                return report
            selected, other_lanes_at = head.submission_id, head.other_lanes_at
            progressed = contracts.head_progressed(head, result)
        self._native_only = False
        await scope.finish()
        return await _step(
            contracts.FINISH_PASS,
            contracts.FinishPassInput(
                **step.model_dump(),
                generation=begin.generation,
                stalls=begin.stalls,
                progressed=progressed,
                now=workflow.now(),
                jitter=workflow.random().random(),
                selected_submission_id=selected,
                other_lanes_at=other_lanes_at,
            ),
            contracts.PassReport,
            self._host_id,
        )

    def _concluded(self, result: contracts.RunHeadResult) -> contracts.PassReport | None:
        """The head's report when its activity finished the pass (None: the finish follows);
        raises when the pass stopped with its worker or failed."""
        if result.shutdown:
            raise PassStopped()
        if result.failure is not None:
            raise PassFailed(result.failure, native=result.native_failure)
        return result.report

    async def _attempt(
        self,
        route: contracts.RunHere | contracts.Dispatch | contracts.NoPoller,
        begin: contracts.BeginPassResult,
    ) -> contracts.RunHeadResult:
        """The head attempt where its route says: here (a local activity bounded by the
        inline budget), on the agent's task queue (only workers with that binding poll it), or
        nowhere: no worker with the binding polls, or none started it within
        ``head_start_ms``, and the head backs off as binding-unavailable."""
        head = route.head
        summary = f"{contracts.RUN_HEAD} {head.subject}"
        if isinstance(route, contracts.RunHere):
            result = await workflow.execute_local_activity(
                contracts.RUN_HEAD,
                head,
                result_type=contracts.RunHeadResult,
                schedule_to_start_timeout=STEP_QUEUE,
                start_to_close_timeout=timedelta(milliseconds=route.bound_ms),
                retry_policy=ONE_ATTEMPT,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=summary,
            )
            return cast(contracts.RunHeadResult, result)
        if isinstance(route, contracts.Dispatch):
            try:
                result = await workflow.execute_activity(
                    contracts.RUN_HEAD,
                    head,
                    result_type=contracts.RunHeadResult,
                    task_queue=contracts.head_task_queue(
                        workflow.info().task_queue, head.agent_id, head.agent_digest
                    ),
                    schedule_to_start_timeout=timedelta(milliseconds=begin.head_start_ms),
                    start_to_close_timeout=timedelta(milliseconds=begin.pass_deadline_ms)
                    + HEAD_CANCEL_GRACE,
                    heartbeat_timeout=timedelta(milliseconds=begin.head_heartbeat_ms),
                    retry_policy=ONE_ATTEMPT,
                    # On the pass deadline, wait until the attempt has released its claim.
                    cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                    summary=summary,
                )
                return cast(contracts.RunHeadResult, result)
            except ActivityError as error:
                timeout = error.cause
                if not (
                    isinstance(timeout, TemporalTimeoutError)
                    and timeout.type == TimeoutType.SCHEDULE_TO_START
                ):
                    raise
        return await _step(
            contracts.HEAD_UNSTARTED,
            contracts.HeadUnstartedInput(
                head=head,
                unpolled=isinstance(route, contracts.NoPoller),
                waited_ms=begin.head_start_ms,
            ),
            contracts.RunHeadResult,
            head.subject,
        )

    async def _rearm(
        self,
        step: contracts.PassStepInput,
        begin: contracts.BeginPassResult,
        message: str,
        *,
        native: bool,
    ) -> contracts.PassReport | None:
        workflow.logger.warning("pass failed on host %s: %s", self._host_id, message)
        try:
            return await _step(
                contracts.REARM_FAILURE,
                contracts.RearmFailureInput(
                    **step.model_dump(),
                    generation=begin.generation,
                    native_only=native,
                    now=workflow.now(),
                    jitter=workflow.random().random(),
                    error=message[:500],
                ),
                contracts.PassReport,
                self._host_id,
            )
        except STEP_FAILURES as rearm_error:
            workflow.logger.warning("failure rearm failed on %s: %s", self._host_id, rearm_error)
            return None


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
