"""The sweeper's activity: wake hosts whose durable alarm is overdue."""

from temporalio import activity
from temporalio.client import Client

from activities.wake import wake_host
from ledger.maintenance import Maintenance
from threadwarden.failpoints import Failpoints
from workflows import contracts as c


class SweepActivities:
    """Finds overdue alarms in Postgres and signal-with-starts their hosts."""

    def __init__(
        self,
        maintenance: Maintenance,
        client: Client,
        *,
        task_queue: str,
        interval_ms: int,
        grace_ms: int,
        failpoints: Failpoints,
    ) -> None:
        self._failpoints = failpoints
        self._maintenance = maintenance
        self._client = client
        self._task_queue = task_queue
        self._interval_ms = interval_ms
        self._grace_ms = grace_ms

    @activity.defn(name=c.SWEEP)
    async def sweep(self, request: c.SweepInput) -> c.SweepResult:
        hosts = await self._maintenance.overdue_hosts(grace_ms=self._grace_ms, limit=request.limit)
        for host_id in hosts:
            # The durable re-arm of a host whose wake was lost (the original's ensureAlarm).
            await self._failpoints.hit("maintenance:ensure:before")
            await wake_host(self._client, host_id, task_queue=self._task_queue, reason="sweeper")
            await self._failpoints.hit("maintenance:ensure:after")
        if hosts:
            activity.logger.info("sweeper woke %d overdue host(s)", len(hosts))
        return c.SweepResult(woken=len(hosts), interval_ms=self._interval_ms)
