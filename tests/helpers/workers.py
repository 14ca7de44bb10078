"""Workers for end-to-end tests that need less than `running_worker` starts."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from temporalio.client import Client

from threadwarden.bindings import BindingRegistry
from threadwarden.failpoints import Failpoints
from threadwarden.scripted import scripted_binding
from threadwarden.worker.plugin import default_registry
from threadwarden.worker.runtime import Connections, running_worker
from threadwarden.worker.settings import Settings


@contextlib.asynccontextmanager
async def worker_without_sweeper(
    settings: Settings, connections: Connections, failpoints: Failpoints
) -> AsyncIterator[Client]:
    """`running_worker` minus the sweeper: with no sweeper on the task queue, nothing but a host
    workflow's own timer acts on a durable alarm. Yields the worker's Temporal client."""
    async with running_worker(settings, connections, failpoints=failpoints, sweeper=False) as w:
        try:
            yield w.client
        finally:
            failpoints.release_all()


QUEUED = "queued"
"""A copy of the built-in scripted binding that is not inline: its heads are dispatched to its
agent queue as regular activities."""


def with_queued_scripted() -> BindingRegistry:
    """The default registry (the inline ``scripted``) plus its non-inline copy, `QUEUED`."""
    registry = default_registry()
    registry.register(dataclasses.replace(scripted_binding(), agent_id=QUEUED, inline=False))
    return registry
