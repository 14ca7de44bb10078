"""The agent queues' workers: while a main worker runs, one small `Worker` per agent task queue
of the bindings runs the head attempts, with activity slots from the process's shared budget,
and stops as soon as the main worker begins to shut down (docs/architecture.md, binding-aware
routing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import (
    FixedSizeSlotSupplier,
    PollerBehaviorSimpleMaximum,
    Worker,
    WorkerTuner,
)

from threadwarden.config.settings import Settings
from threadwarden.worker.slots import SharedSlots

HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""Longest delay before a heartbeat (and so a cancellation) reaches the server."""


def head_heartbeat_throttle(settings: Settings) -> timedelta:
    """How often a head attempt's heartbeats reach the server at most: every lease renewal,
    and at least every `HEARTBEAT_THROTTLE`.

    The head's heartbeat timeout is the lease (``lease_ms``). The SDK sends heartbeats no more
    often than its throttle; were that 2 s against a 3 s lease, one late second anywhere (the
    event loop, the RPC, a busy server) would time the attempt out. Throttled to the renewal
    interval, the timeout allows as many late beats as the lease allows failed renewals."""
    return min(HEARTBEAT_THROTTLE, timedelta(milliseconds=settings.lease_renew_ms))


@contextlib.asynccontextmanager
async def running_heads(
    worker: Worker,
    queues: Mapping[str, int],
    *,
    run_head: Callable[..., Any],
    slots: SharedSlots,
    settings: Settings,
) -> AsyncIterator[None]:
    """Run ``run_head`` on each of ``queues`` (agent task queue → its activity polls) with
    ``worker``'s client until the block exits, and make ``worker``'s shutdown stop them."""
    heads = [
        _head_worker(worker.client, queue, polls, run_head, slots, settings)
        for queue, polls in queues.items()
    ]
    async with contextlib.AsyncExitStack() as stack:
        for head in heads:
            await stack.enter_async_context(head)
        _stop_heads_with(worker, heads)
        yield


def _head_worker(
    client: Client,
    queue: str,
    polls: int,
    run_head: Callable[..., Any],
    slots: SharedSlots,
    settings: Settings,
) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        activities=[run_head],
        tuner=WorkerTuner.create_composite(
            workflow_supplier=FixedSizeSlotSupplier(1),
            activity_supplier=slots,
            local_activity_supplier=FixedSizeSlotSupplier(1),
            nexus_supplier=FixedSizeSlotSupplier(1),
        ),
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(polls),
        max_cached_workflows=0,
        max_heartbeat_throttle_interval=head_heartbeat_throttle(settings),
    )


def _stop_heads_with(worker: Worker, heads: Sequence[Worker]) -> None:
    """Make ``worker``'s shutdown stop its agent queues' workers at once: a stopping process
    takes no new head while it waits for its running work (the SDK has no shutdown hook for
    plugins, so the instance's ``shutdown`` is wrapped; repeated shutdowns are safe)."""
    original = worker.shutdown
    pending: list[asyncio.Future[None]] = []

    async def shutdown() -> None:
        pending.extend(asyncio.ensure_future(head.shutdown()) for head in heads)
        await original()

    setattr(worker, "shutdown", shutdown)  # noqa: B010 - an instance attribute, on purpose
