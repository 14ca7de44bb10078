"""The client's two calls to Temporal: waking a host (signal-with-start of its maintenance
workflow) and asking whether any worker polls a head's task queue.

The worker's activities make the same calls (`threadwarden.activities.wake`,
`threadwarden.activities.pollers`), so this module stands alone: it imports Temporal's client
and the workflows' contracts, nothing of the ledger or the worker."""

from __future__ import annotations

import asyncio
import logging

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from threadwarden.workflows import contracts as c

logger = logging.getLogger(__name__)

ASK_TIMEOUT_S = 2.0
"""A describe that takes longer counts as unknown (the head is dispatched as usual)."""
CONFIRM_AFTER_S = 0.5
"""An empty answer is confirmed by a second one this much later."""


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
