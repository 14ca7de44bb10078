"""Waking a host from a worker, best effort (the signal-with-start itself is the client's:
`threadwarden.workflows.client_calls.wake_host`)."""

import logging

from temporalio.client import Client

from threadwarden.workflows.client_calls import wake_host

logger = logging.getLogger(__name__)


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
