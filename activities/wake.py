"""Waking a host: signal-with-start of its maintenance workflow."""

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from threadwarden.workflows import contracts as c


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
