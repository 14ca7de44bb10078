"""Whether any worker polls a head's task queue: a missing binding is seen at once, not after
the head's schedule-to-start timeout."""

from collections.abc import Iterable

from temporalio.client import Client

from threadwarden.workflows import contracts
from threadwarden.workflows.client_calls import PolledQueues


class HeadPollers:
    """Asks Temporal (DescribeTaskQueue, through the client's `PolledQueues`: a queue seen
    polled is remembered for a while) whether the activity task queue of an agent's heads has
    pollers. Temporal lists a worker as a poller for a few minutes after its last poll, so a
    worker that died a moment ago still counts: its heads wait out ``head_start_timeout_ms``
    as before. Only a queue no worker polled lately is reported unpolled.

    The queues this worker process polls itself (``local``) are polled without asking: with
    one worker holding every binding, the hot path never asks, and a head never races its
    own worker's first poll."""

    def __init__(self, client: Client, *, task_queue: str, local: Iterable[str] = ()) -> None:
        self._client = client
        self._task_queue = task_queue
        self._local = frozenset(local)
        self._polled = PolledQueues()

    async def unpolled(self, agent_id: str, agent_digest: str | None) -> bool:
        """True only when Temporal answered that no worker polls the head's queue; an error
        or a slow answer is not a verdict (False: the schedule-to-start timeout decides)."""
        queue = contracts.head_task_queue(self._task_queue, agent_id, agent_digest)
        if queue in self._local:
            return False
        return await self._polled.unpolled(self._client, queue)
