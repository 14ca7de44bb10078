"""The calls made to the host workflow and its queues from outside a workflow, with a Temporal
client: waking a host (signal-with-start of its workflow) and asking whether any worker polls a
head's task queue (`PolledQueues` remembers the queues seen polled, so that a submit asks at most
once in a while).

Both the application's client (`threadwarden.client`) and the worker's activities
(`threadwarden.activities.wake`, `.pollers`, `.sweep`, `.auxiliary`) make them, so they live
beside the workflow they address: this module imports Temporal's client and the contracts. No
workflow imports it (it is not deterministic code; the workflows' contract keeps the ledger,
activities, worker and client out of it all the same)."""

from __future__ import annotations

import asyncio
import logging
import time

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from threadwarden.workflows import contracts

logger = logging.getLogger(__name__)

ASK_TIMEOUT_S = 2.0
"""A describe that takes longer counts as unknown (the head is dispatched as usual)."""
CONFIRM_AFTER_S = 0.5
"""An empty answer is confirmed by a second one this much later."""
POLLED_TTL_S = 15.0
"""A queue seen polled is taken as polled this long without asking Temporal again."""


async def wake_host(client: Client, host_id: str, *, task_queue: str, reason: str) -> None:
    """Start the host's workflow if it is idle, else signal the running one. Wakes are hints."""
    await client.start_workflow(
        contracts.HOST_WORKFLOW,
        contracts.HostInput(host_id=host_id),
        id=contracts.host_workflow_id(host_id),
        task_queue=task_queue,
        start_signal=contracts.WAKE_SIGNAL,
        start_signal_args=[contracts.WakeInput(reason=reason)],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def queue_polled(client: Client, queue: str, timeout_s: float = ASK_TIMEOUT_S) -> bool | None:
    """Whether Temporal lists pollers of the activity task queue ``queue`` (None: no answer
    within ``timeout_s``, or an error: a diagnostic, never a verdict)."""
    try:
        async with asyncio.timeout(timeout_s):
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
                )
            )
    except Exception as error:  # a diagnostic: never a reason to fail the pass
        logger.debug("pollers of %s unknown: %r", queue, error)
        return None
    return bool(described.pollers)


class PolledQueues:
    """Whether any worker polls a task queue, asked of Temporal with `queue_polled` and
    remembered for `POLLED_TTL_S` once seen polled (or once Temporal did not answer). Temporal
    lists a worker as a poller for a few minutes after its last poll, so only a queue no worker
    polled lately is reported unpolled; a queue seen unpolled is asked again next time (a
    worker that just started is found)."""

    def __init__(self, *, timeout_s: float = ASK_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s
        self._polled_at: dict[str, float] = {}

    async def unpolled(self, client: Client, queue: str) -> bool:
        """True only when Temporal answered, twice `CONFIRM_AFTER_S` apart, that no worker
        polls ``queue``; an error or a slow answer is not a verdict (False)."""
        seen = self._polled_at.get(queue)
        if seen is not None and time.monotonic() - seen < POLLED_TTL_S:
            return False
        # A worker that started a moment ago is listed once its first poll arrived (within
        # about 0.1 s): an empty answer is asked again once before it counts.
        polled = await queue_polled(client, queue, self._timeout_s)
        if polled is False:
            await asyncio.sleep(CONFIRM_AFTER_S)
            polled = await queue_polled(client, queue, self._timeout_s)
        if polled is False:
            self._polled_at.pop(queue, None)
            return True
        # Polled, or no answer (not a verdict): a slow Temporal is not asked again at once.
        self._polled_at[queue] = time.monotonic()
        return False
