"""The ``threadwarden worker`` shell: settings → pool → Temporal client with the plugin → Worker."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from temporalio.client import Client, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig
from temporalio.worker import PollerBehaviorSimpleMaximum, UnsandboxedWorkflowRunner, Worker

from threadwarden.bindings import BindingRegistry
from threadwarden.errors import StackNotFound
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.migrations import verify
from threadwarden.ledger.pool import create_pool
from threadwarden.publication import PublicationSink
from threadwarden.worker.capacity import MAIN_POLLERS, pool_size
from threadwarden.worker.embedded import read_endpoints
from threadwarden.worker.metrics import MeteredRuntime
from threadwarden.worker.plugin import (
    ThreadwardenPlugin,
    default_registry,
    verify_search_attributes,
)
from threadwarden.worker.settings import Settings
from threadwarden.worker.telemetry import configure_tracing, interceptors

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Connections:
    """Where the ledger and Temporal are, resolved from settings or the running dev stack."""

    database_url: str = field(repr=False)  # may hold a password
    temporal_address: str
    ui_url: str | None = None


def resolve(settings: Settings) -> Connections:
    """Settings win; otherwise the stack ``threadwarden dev`` recorded in the data dir."""
    stack = read_endpoints(settings.data_dir)
    configured = settings.database_url.get_secret_value() if settings.database_url else None
    database_url = configured or (stack.database_url if stack else None)
    temporal_address = settings.temporal_address or (stack.temporal_address if stack else None)
    if database_url is None or temporal_address is None:
        raise StackNotFound(
            f"no running stack in {settings.data_dir} and THREADWARDEN_DATABASE_URL /"
            " THREADWARDEN_TEMPORAL_ADDRESS unset: start `threadwarden dev` or set them"
        )
    return Connections(database_url, temporal_address, stack.ui_url if stack else None)


async def connect_temporal(address: str, namespace: str) -> Client:
    """A plaintext client with the pydantic data converter and the tracing interceptor (the
    dev stack's server; tests)."""
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=pydantic_data_converter,
        interceptors=interceptors(),
    )


def tls_config(settings: Settings) -> bool | TLSConfig:
    """False (plaintext), True (TLS with the system roots), or a `TLSConfig` with the client
    certificate, the server CA and the server name the settings name (files read now)."""
    if not settings.temporal_tls_enabled:
        return False
    paths = (
        settings.temporal_tls_cert_path,
        settings.temporal_tls_key_path,
        settings.temporal_tls_ca_path,
    )
    if all(p is None for p in paths) and settings.temporal_tls_server_name is None:
        return True
    cert, key, ca = (None if p is None else p.read_bytes() for p in paths)
    return TLSConfig(
        client_cert=cert,
        client_private_key=key,
        server_root_ca_cert=ca,
        domain=settings.temporal_tls_server_name,
    )


async def connect_configured(
    settings: Settings,
    connections: Connections,
    plugins: Sequence[Plugin] = (),
    *,
    runtime: Runtime | None = None,
) -> Client:
    """The Temporal client the settings describe (namespace, TLS or mutual TLS, API key), with
    the pydantic data converter and the tracing interceptor, or with ``plugins`` (which bring
    the interceptor themselves: `ThreadwardenPlugin` does); on ``runtime`` (default: the SDK's
    default runtime)."""
    api_key = settings.temporal_api_key
    return await Client.connect(
        connections.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        interceptors=[] if plugins else interceptors(),
        plugins=plugins,
        tls=tls_config(settings),
        api_key=api_key.get_secret_value() if api_key else None,
        runtime=runtime,
    )


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
