"""The sweeper: the safety net that wakes hosts whose durable alarm is overdue.

Wakes are hints. A mutation that committed but whose signal was lost (the process died in between)
still has ``alarm_at`` in Postgres; the sweeper finds it and signal-with-starts the host.

History is a cost, and an idle deployment pays it too. A sweep is a local activity (one marker
event) and returns when to sweep next: soon while it finds work or an alarm is near, otherwise
when the earliest alarm will be overdue, at most ``sweep_idle_interval_ms`` later. An idle
iteration writes 6 events (workflow task scheduled, started, completed; marker; timer started,
fired): 240 per hour at the default 90 s (docs/operations.md).
"""

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from threadwarden.workflows import auxiliary_contracts, contracts
from threadwarden.workflows.passes import ONE_ATTEMPT

ITERATIONS_PER_RUN = 200
"""Sweeps per run before continuing as new, to keep history short."""
SWEEP_TIMEOUT = timedelta(seconds=30)
FAILED_SWEEP_PAUSE = timedelta(seconds=2)
"""After a failed sweep (its interval is unknown), try again soon: the sweeper is the safety net."""
SWEEP_FAILURES = (ActivityError, ApplicationError, TemporalTimeoutError)
"""How a failed local activity surfaces: its ApplicationError or TimeoutError itself."""


@workflow.defn(name=contracts.SWEEPER_WORKFLOW)
class SweeperWorkflow:
    """Runs bounded sweeps, each scheduling the next, forever (continuing as new now and then)."""

    @workflow.run
    async def run(self, state: auxiliary_contracts.SweeperInput) -> None:
        for _ in range(ITERATIONS_PER_RUN):
            try:
                result = await _sweep()
                interval = timedelta(milliseconds=result.interval_ms)
            except SWEEP_FAILURES as error:  # a failed sweep must not end the safety net
                workflow.logger.warning("sweep failed: %s", error)
                interval = FAILED_SWEEP_PAUSE
            await workflow.sleep(interval)
        workflow.continue_as_new(
            auxiliary_contracts.SweeperInput(iterations=state.iterations + ITERATIONS_PER_RUN)
        )


async def _sweep() -> auxiliary_contracts.SweepResult:
    result = await workflow.execute_local_activity(
        contracts.SWEEP,
        auxiliary_contracts.SweepInput(),
        result_type=auxiliary_contracts.SweepResult,
        start_to_close_timeout=SWEEP_TIMEOUT,
        retry_policy=ONE_ATTEMPT,
        summary=f"sweep {workflow.info().task_queue}",
    )
    assert isinstance(result, auxiliary_contracts.SweepResult)
    return result
