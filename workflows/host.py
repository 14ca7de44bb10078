"""The host maintenance workflow: maintenance passes, each followed by a wait for the alarm.

Postgres holds the truth; this workflow only orchestrates. A pass walks its steps (each an
activity with an explicit timeout and a single attempt); then the run waits for min(alarm, wake)
on a workflow timer (or starts the next pass at once when the last one made progress). After
100 passes, or when Temporal suggests it, the run continues as new. When a pass cleared the alarm
and no wake is pending the run completes: an idle host holds no open workflow.
"""

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributeUpdate

from workflows import contracts as c
from workflows.passes import MaintenancePass

SEVERAL_PASSES_PER_RUN = "several-passes-per-run"
"""Patch marker: a run loops passes instead of continuing as new after each one."""
PASS_DEADLINE_AND_BINDING_RETRIES = "pass-deadline-and-binding-retries"
"""Patch marker: passes are bounded by the pass deadline and record binding retries."""
AUXILIARY_SCOPE = "auxiliary-scope"
"""Patch marker: auxiliary work runs as concurrent activities beside the native work, and a
required publication gates it."""
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


@workflow.defn(name=c.HOST_WORKFLOW)
class HostWorkflow:
    """The maintenance loop of one host: passes, waits for the alarm, continue-as-new."""

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
        bounded = workflow.patched(PASS_DEADLINE_AND_BINDING_RETRIES)
        auxiliary = bounded and workflow.patched(AUXILIARY_SCOPE)
        for passes_in_run in range(1, MAX_PASSES_PER_RUN + 1):
            # Wakes that arrived before this pass are consumed by it.
            self._wake_pending = False
            self._set_phase("pass")
            report = await MaintenancePass(
                self._host_id, bounded=bounded, auxiliary=auxiliary
            ).run()
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
