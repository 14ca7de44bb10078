"""The host maintenance workflow: maintenance passes, each followed by a wait for the alarm.

Postgres holds the truth; this workflow only orchestrates. A pass walks its steps (each an
activity with an explicit timeout and a single attempt); then the run waits for min(alarm, wake)
on a workflow timer (or starts the next pass at once when the last one made progress). After
100 passes, or when Temporal suggests it, the run continues as new. When a pass cleared the alarm
and no wake is pending the run completes: an idle host holds no open workflow.
"""

import contextlib
from datetime import timedelta
from typing import Any, TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributeUpdate
from temporalio.exceptions import ActivityError, ApplicationError

from workflows import contracts as c

T = TypeVar("T")

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
SHORT_STEP = timedelta(seconds=30)
PASS_DEADLINE = timedelta(minutes=14)
YIELD_AFTER = timedelta(minutes=10)
HEAD_HEARTBEAT = timedelta(seconds=30)
SEVERAL_PASSES_PER_RUN = "several-passes-per-run"
"""Patch marker: a run loops passes instead of continuing as new after each one."""
MAX_PASSES_PER_RUN = 100
"""Continue as new after this many passes (or sooner when Temporal suggests it)."""
FAILURE_FALLBACK = timedelta(seconds=5)
"""How long to wait when even the failure rearm could not run (e.g. the database is down)."""

PHASE = SearchAttributeKey.for_keyword("ThreadwardenPhase")
LAST_OUTCOME = SearchAttributeKey.for_keyword("ThreadwardenLastOutcome")
GENERATION = SearchAttributeKey.for_int("ThreadwardenGeneration")
NONTERMINAL = SearchAttributeKey.for_int("ThreadwardenNonterminal")
NEXT_ALARM = SearchAttributeKey.for_datetime("ThreadwardenNextAlarm")
SEARCH_ATTRIBUTES = (PHASE, LAST_OUTCOME, GENERATION, NONTERMINAL, NEXT_ALARM)


class PassFailed(Exception):
    """A pass step failed; the failure rearm has been attempted."""


@workflow.defn(name=c.HOST_WORKFLOW)
class HostWorkflow:
    """One run = one maintenance pass of one host."""

    def __init__(self) -> None:
        self._host_id = ""
        self._wake_pending = False
        self._phase = "starting"
        self._passes = 0
        self._last: c.PassReport | None = None

    @workflow.signal(name=c.WAKE_SIGNAL)
    def wake(self, _: c.WakeInput) -> None:
        """A hint that a mutation committed; deferred while a pass runs."""
        self._wake_pending = True

    @workflow.query(name=c.STATUS_QUERY)
    def status(self) -> c.HostStatus:
        return c.HostStatus(
            host_id=self._host_id,
            phase=self._phase,
            passes=self._passes,
            wake_pending=self._wake_pending,
            last_outcome=self._last.outcome if self._last else None,
            next_alarm=self._last.alarm_at if self._last else None,
        )

    @workflow.run  # noqa: RET503 - the last statement is continue-as-new, which never returns
    async def run(self, host: c.HostInput) -> c.HostResult:
        self._host_id = host.host_id
        self._passes = host.passes
        # Runs recorded before this marker did exactly one pass each; they must keep replaying.
        several_passes = workflow.patched(SEVERAL_PASSES_PER_RUN)
        for passes_in_run in range(1, MAX_PASSES_PER_RUN + 1):
            # Wakes that arrived before this pass are consumed by it.
            self._wake_pending = False
            self._set_phase("pass")
            report = await self._pass()
            self._passes += 1
            self._last = report
            self._publish(report)
            if report is not None and report.alarm_at is None and not self._wake_pending:
                self._set_phase("idle")
                await workflow.wait_condition(workflow.all_handlers_finished)
                return c.HostResult(
                    host_id=host.host_id, passes=self._passes, last_outcome=report.outcome
                )
            self._set_phase("waiting")
            if not (several_passes and report is not None and report.progressed):
                await self._wait_for_alarm(report)
            if not several_passes or self._run_is_long(passes_in_run):
                break
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(c.HostInput(host_id=host.host_id, passes=self._passes))

    @staticmethod
    def _run_is_long(passes_in_run: int) -> bool:
        return passes_in_run >= MAX_PASSES_PER_RUN or workflow.info().is_continue_as_new_suggested()

    async def _wait_for_alarm(self, report: c.PassReport | None) -> None:
        if self._wake_pending:
            return
        if report is None or report.alarm_at is None:
            wait = FAILURE_FALLBACK
        else:
            wait = max(report.alarm_at - workflow.now(), timedelta(0))
        if wait <= timedelta(0):
            return
        with contextlib.suppress(TimeoutError):  # the alarm came due before any wake
            await workflow.wait_condition(lambda: self._wake_pending, timeout=wait)

    async def _pass(self) -> c.PassReport | None:
        try:
            begin = await self._step(
                c.BEGIN_PASS,
                c.BeginPassInput(host_id=self._host_id, now=workflow.now()),
                c.BeginPassResult,
            )
        except ActivityError as error:
            # No generation was observed, so there is nothing to rearm: begin's own pre-arm
            # (or the mutation's) and the sweeper converge the host.
            workflow.logger.warning("begin failed on host %s: %s", self._host_id, error.cause)
            return None
        step = c.PassStepInput(host_id=self._host_id, epoch=begin.epoch)
        native_only = False
        try:
            if begin.caught_up:
                return await self._step(
                    c.FINISH_CAUGHT_UP,
                    c.FinishCaughtUpInput(**step.model_dump(), now=workflow.now()),
                    c.PassReport,
                )
            native_only = True
            progressed = await self._native(step)
            native_only = False
            return await self._step(
                c.FINISH_PASS,
                c.FinishPassInput(
                    **step.model_dump(),
                    generation=begin.generation,
                    stalls=begin.stalls,
                    progressed=progressed,
                    now=workflow.now(),
                    jitter=workflow.random().random(),
                ),
                c.PassReport,
            )
        except ActivityError as error:
            return await self._rearm_failure(step, begin, native_only, error)

    async def _native(self, step: c.PassStepInput) -> bool:
        """Recovery, then one head attempt on the selected lane. True when something progressed."""
        recovered = await self._step(c.RECOVER, step, c.RecoverResult)
        selected = await self._step(
            c.SELECT_LANE,
            c.SelectLaneInput(**step.model_dump(), now=workflow.now()),
            c.SelectLaneResult,
        )
        settled = False
        if selected.thread_id is not None:
            head = await workflow.execute_activity(
                c.RUN_HEAD,
                c.RunHeadInput(
                    **step.model_dump(),
                    thread_id=selected.thread_id,
                    yield_after=workflow.now() + YIELD_AFTER,
                ),
                result_type=c.RunHeadResult,
                start_to_close_timeout=PASS_DEADLINE,
                heartbeat_timeout=HEAD_HEARTBEAT,
                retry_policy=ONE_ATTEMPT,
            )
            settled = head.outcome is not None
        return settled or recovered.repaired > 0

    async def _rearm_failure(
        self,
        step: c.PassStepInput,
        begin: c.BeginPassResult,
        native_only: bool,
        error: ActivityError,
    ) -> c.PassReport | None:
        cause = error.cause
        message = str(cause) if cause is not None else str(error)
        workflow.logger.warning("pass step failed on host %s: %s", self._host_id, message)
        if isinstance(cause, ApplicationError) and cause.type == "StalePass":
            return None
        try:
            return await self._step(
                c.REARM_FAILURE,
                c.RearmFailureInput(
                    **step.model_dump(),
                    generation=begin.generation,
                    native_only=native_only,
                    now=workflow.now(),
                    jitter=workflow.random().random(),
                    error=message[:500],
                ),
                c.PassReport,
            )
        except ActivityError as rearm_error:
            workflow.logger.warning("failure rearm failed on %s: %s", self._host_id, rearm_error)
            return None

    async def _step(self, name: str, arg: object, result_type: type[T]) -> T:
        result = await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=SHORT_STEP,
            retry_policy=ONE_ATTEMPT,
        )
        return cast(T, result)

    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        workflow.upsert_search_attributes([PHASE.value_set(phase)])

    def _publish(self, report: c.PassReport | None) -> None:
        outcome = report.outcome if report else "failed"
        updates: list[SearchAttributeUpdate[Any]] = [LAST_OUTCOME.value_set(outcome)]
        if report is not None:
            updates += [
                GENERATION.value_set(report.generation),
                NONTERMINAL.value_set(report.nonterminal),
                NEXT_ALARM.value_set(report.alarm_at)
                if report.alarm_at
                else NEXT_ALARM.value_unset(),
            ]
        workflow.upsert_search_attributes(updates)
        workflow.upsert_memo({"last_pass": report.model_dump(mode="json") if report else None})
