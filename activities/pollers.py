"""Whether any worker polls a head's task queue: a missing binding is seen at once, not after
the head's schedule-to-start timeout."""

import asyncio
import time
from collections.abc import Iterable

from temporalio.client import Client

from threadwarden.workflows import contracts
from threadwarden.workflows.client_calls import CONFIRM_AFTER_S, queue_polled

POLLED_TTL_S = 15.0
"""How long a queue seen polled is taken as polled without asking again (per worker process).
A queue seen unpolled is asked again at the next head: a worker that just started is found."""


class HeadPollers:
    """Asks Temporal (DescribeTaskQueue) whether the activity task queue of an agent's heads
    has pollers. Temporal lists a worker as a poller for a few minutes after its last poll, so
    a worker that died a moment ago still counts: its heads wait out ``head_start_timeout_ms``
    as before. Only a queue no worker polled lately is reported unpolled.

    The queues this worker process polls itself (``local``) are polled without asking: with
    one worker holding every binding, the hot path never asks, and a head never races its
    own worker's first poll."""

    def __init__(self, client: Client, *, task_queue: str, local: Iterable[str] = ()) -> None:
        self._client = client
        self._task_queue = task_queue
        self._local = frozenset(local)
        self._polled_at: dict[str, float] = {}

    async def unpolled(self, agent_id: str, agent_digest: str | None) -> bool:
        """True only when Temporal answered that no worker polls the head's queue; an error
        or a slow answer is not a verdict (False: the schedule-to-start timeout decides)."""
        queue = contracts.head_task_queue(self._task_queue, agent_id, agent_digest)
        if queue in self._local:
            return False
        seen = self._polled_at.get(queue)
        if seen is not None and time.monotonic() - seen < POLLED_TTL_S:
            return False
        # A worker that started a moment ago is listed once its first poll arrived (within
        # about 0.1 s): an empty answer is asked again once before it counts.
        polled = await self._ask(queue)
        if polled is False:
            await asyncio.sleep(CONFIRM_AFTER_S)
            polled = await self._ask(queue)
        if polled is None:  # unknown: not a verdict
            return False
        if polled:
            self._polled_at[queue] = time.monotonic()
            return False
        self._polled_at.pop(queue, None)
        return True

    async def _ask(self, queue: str) -> bool | None:
        return await queue_polled(self._client, queue)
