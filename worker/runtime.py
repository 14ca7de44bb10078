"""The ``threadwarden worker`` shell: settings → pool → Temporal client with the plugin → Worker."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker

from threadwarden.bindings import BindingRegistry
from threadwarden.config.connect import Connections, connect_configured
from threadwarden.config.settings import Settings
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.migrations import verify
from threadwarden.ledger.pool import create_pool
from threadwarden.publication import PublicationSink
from threadwarden.worker.capacity import MAIN_POLLERS, pool_size
from threadwarden.worker.metrics import MeteredRuntime
from threadwarden.worker.plugin import (
    ThreadwardenPlugin,
    default_registry,
    verify_search_attributes,
)
from threadwarden.worker.telemetry import configure_tracing

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def running_worker(
    settings: Settings,
    connections: Connections,
    registry: BindingRegistry | None = None,
    *,
    failpoints: Failpoints | None = None,
    sinks: Sequence[PublicationSink] = (),
    host: HostMaintenance | None = None,
    sweeper: bool = True,
) -> AsyncIterator[Worker]:
    """Verify schema and attributes, then run a worker (with the agent queues' workers and the
    sweeper) until the block exits: `ThreadwardenPlugin` on a client and worker of its own.

    ``failpoints`` lets tests (threadwarden's and applications') inject faults into passes
    (unset: those the ``failpoints`` setting arms, usually none);
    ``sinks`` are publication sinks besides the built-in Postgres NOTIFY one; ``host`` is the
    application's host-wave plug-in (see `threadwarden.hosts`); ``sweeper`` false leaves the
    task queue without a sweeper (tests of a host's own timer).
    """
    configure_tracing(settings)
    registry = registry or default_registry()
    pool = await create_pool(
        connections.database_url,
        max_size=pool_size(settings, registry),
        acquire_timeout_ms=settings.pool_acquire_timeout_ms,
    )
    try:
        async with pool.acquire() as conn:  # refused here, before anything starts
            await verify(conn)
        plugin = ThreadwardenPlugin(
            bindings=registry,
            database=pool,
            settings=settings,
            sinks=sinks,
            host=host,
            failpoints=failpoints,
            sweeper=sweeper,
        )
        # With an endpoint, the client's runtime buffers the Temporal SDK's metrics (task
        # latencies, slots, polls) so that the plugin serves them beside threadwarden's own.
        runtime = MeteredRuntime() if settings.metrics_bind is not None else None
        client = await connect_configured(settings, connections, [plugin], runtime=runtime)
        await verify_search_attributes(client)
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            # No sandbox at run time: it re-imports the workflow modules for every new run and
            # checks every payload's context, more CPU than a pass itself. Determinism is
            # guarded where it can be proven: the replay tests run every workflow path under
            # the sandbox, and the import contracts keep I/O out of `workflows/`.
            workflow_runner=UnsandboxedWorkflowRunner(),
            # Only what the pool can serve inside the timeouts (docs/configuration.md,
            # capacity); the activity slots are shared with the agent queues' workers.
            tuner=plugin.tuner(),
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(MAIN_POLLERS),
        )
        async with worker:
            yield worker
    finally:
        await pool.close()
