"""The sweeper's activity: wake hosts whose durable alarm is overdue, say when to sweep next."""

import time
from dataclasses import KW_ONLY, dataclass

from temporalio import activity
from temporalio.client import Client

from threadwarden.failpoints import Failpoints
from threadwarden.ledger.sweep import Sweeps
from threadwarden.workflows import auxiliary_contracts, contracts
from threadwarden.workflows.client_calls import wake_host

WAKE_BUDGET_S = 10.0
"""How long one sweep spends waking hosts (a third of its 30 s timeout): under a burst, when
hundreds of alarms are overdue and each wake waits on a busy server, the sweep stops there and
the next one (``interval_ms`` later) wakes the rest, instead of timing out."""


def next_sweep_ms(
    *, woken: int, next_due_ms: int | None, interval_ms: int, idle_interval_ms: int
) -> int:
    """How long the sweeper sleeps after a sweep.

    ``interval_ms`` while it is busy: it woke hosts (more may be left) or an alarm comes due
    within that. Otherwise until the next alarm is overdue by the grace (``next_due_ms``), at most
    ``idle_interval_ms``; with no alarm armed at all, ``idle_interval_ms``.
    """
    if woken:
        return interval_ms
    if next_due_ms is None:
        return idle_interval_ms
    return min(max(next_due_ms, interval_ms), idle_interval_ms)


@dataclass(eq=False)
class SweepActivities:
    """Finds overdue alarms in Postgres and signal-with-starts their hosts.

    Run as a local activity by the sweeper (one marker event per sweep); it also schedules the
    next sweep from the earliest alarm (see `next_sweep_ms`).
    """

    ledger: Sweeps
    client: Client
    _: KW_ONLY
    task_queue: str
    interval_ms: int
    grace_ms: int
    failpoints: Failpoints
    idle_interval_ms: int

    @activity.defn(name=contracts.SWEEP)
    async def sweep(
        self, request: auxiliary_contracts.SweepInput
    ) -> auxiliary_contracts.SweepResult:
        scan = await self.ledger.scan(grace_ms=self.grace_ms, limit=request.limit)
        next_due_ms, woken = scan.next_due_ms, 0
        stop_at = time.monotonic() + WAKE_BUDGET_S
        for host_id in scan.overdue:
            if time.monotonic() >= stop_at:  # the rest are still overdue at the next sweep
                activity.logger.info(
                    "sweeper: %d overdue host(s) left for the next sweep", len(scan.overdue) - woken
                )
                break
            # The durable re-arm of a host whose wake was lost (the original's ensureAlarm).
            await self.failpoints.hit("maintenance:ensure:before")
            await wake_host(self.client, host_id, task_queue=self.task_queue, reason="sweeper")
            await self.failpoints.hit("maintenance:ensure:after")
            woken += 1
        if woken:
            activity.logger.info("sweeper woke %d overdue host(s)", woken)
        interval = next_sweep_ms(
            woken=woken,
            next_due_ms=next_due_ms,
            interval_ms=self.interval_ms,
            idle_interval_ms=self.idle_interval_ms,
        )
        return auxiliary_contracts.SweepResult(woken=woken, interval_ms=interval)
