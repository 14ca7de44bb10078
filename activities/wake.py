"""Waking a host: signal-with-start of its maintenance workflow."""

import logging

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from threadwarden.workflows import contracts as c

logger = logging.getLogger(__name__)


async def wake_host(client: Client, host_id: str, *, task_queue: str, reason: str) -> None:
    """Start the host's workflow if it is idle, else signal the running one. Wakes are hints."""
    await client.start_workflow(
        c.HOST_WORKFLOW,
        c.HostInput(host_id=host_id),
        id=c.host_workflow_id(host_id),
        task_queue=task_queue,
        start_signal=c.WAKE_SIGNAL,
        start_signal_args=[c.WakeInput(reason=reason)],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


class Waker:
    """Best-effort wakes from a worker (a child's host after a delegation, a parent's host
    after its child settled): a failure is logged; the host's durable alarm and the sweeper
    converge without it."""

    def __init__(self, client: Client | None, *, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def wake(self, host_id: str, *, reason: str) -> None:
        if self._client is None:
            return
        try:
            await wake_host(self._client, host_id, task_queue=self._task_queue, reason=reason)
        except Exception as error:
            logger.warning("wake of host %s failed (the sweeper will catch up): %r", host_id, error)
