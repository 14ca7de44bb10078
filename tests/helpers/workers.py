"""Workers for end-to-end tests that need less than `running_worker` starts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from temporalio.client import Client

from threadwarden.failpoints import Failpoints
from threadwarden.ledger.pool import create_pool
from threadwarden.worker.runtime import (
    Connections,
    build_worker,
    connect_temporal,
    default_registry,
)
from threadwarden.worker.settings import Settings, worker_capacity


@contextlib.asynccontextmanager
async def worker_without_sweeper(
    settings: Settings, connections: Connections, failpoints: Failpoints
) -> AsyncIterator[Client]:
    """`running_worker` minus the sweeper: with no sweeper on the task queue, nothing but a host
    workflow's own timer acts on a durable alarm. Yields the worker's Temporal client."""
    pool = await create_pool(connections.database_url, max_size=worker_capacity(settings).pool_size)
    try:
        temporal = await connect_temporal(connections.temporal_address, "default")
        worker = build_worker(temporal, pool, settings, default_registry(), failpoints)
        async with worker:
            try:
                yield temporal
            finally:
                failpoints.release_all()
    finally:
        await pool.close()
