"""Assembly: settings → pool → Temporal client → activity instances → Worker."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from threadwarden.activities.attempt import AttemptActivities
from threadwarden.activities.auxiliary import AuxiliaryActivities
from threadwarden.activities.maintenance import MaintenanceActivities, PassLimits
from threadwarden.activities.pass_steps import PassSteps
from threadwarden.activities.sweep import SweepActivities
from threadwarden.bindings import BindingRegistry
from threadwarden.errors import StackNotFound, ThreadwardenError
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.host_work import HostWork
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.messages import Messages
from threadwarden.ledger.migrations import verify
from threadwarden.ledger.pool import create_pool
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import NotifySink, Publications
from threadwarden.ledger.sweep import Sweeps
from threadwarden.publication import PublicationSink
from threadwarden.scripted import scripted_binding
from threadwarden.worker.embedded import read_endpoints
from threadwarden.worker.settings import Settings, worker_capacity
from threadwarden.worker.telemetry import configure_tracing, interceptors
from threadwarden.workflows import contracts as c
from threadwarden.workflows.host import SEARCH_ATTRIBUTES, HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow

logger = logging.getLogger(__name__)

HEARTBEAT_THROTTLE = timedelta(seconds=2)


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


async def connect_temporal(
    address: str,
    namespace: str,
    *,
    tls: bool | TLSConfig = False,
    api_key: str | None = None,
) -> Client:
    """A client with the pydantic data converter and the tracing interceptor."""
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=pydantic_data_converter,
        interceptors=interceptors(),
        tls=tls if tls is not False else api_key is not None,
        api_key=api_key,
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


async def connect_configured(settings: Settings, connections: Connections) -> Client:
    """The Temporal client the settings describe (namespace, TLS or mutual TLS, API key)."""
    return await connect_temporal(
        connections.temporal_address,
        settings.temporal_namespace,
        tls=tls_config(settings),
        api_key=settings.temporal_api_key.get_secret_value() if settings.temporal_api_key else None,
    )


async def verify_search_attributes(client: Client) -> None:
    """Refuse to start when the namespace lacks one of our search attributes, or holds one
    under another type (see `threadwarden setup`)."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    registered = response.custom_attributes
    missing = [k.name for k in SEARCH_ATTRIBUTES if k.name not in registered]
    if missing:
        raise ThreadwardenError(
            f"namespace {client.namespace}: search attributes {', '.join(missing)} are not"
            " registered (run `threadwarden setup`)"
        )
    for key in SEARCH_ATTRIBUTES:
        if registered[key.name] != int(key.indexed_value_type):
            found = IndexedValueType.Name(registered[key.name]).removeprefix("INDEXED_VALUE_TYPE_")
            raise ThreadwardenError(
                f"namespace {client.namespace}: search attribute {key.name} is registered as"
                f" {found}, expected {key.indexed_value_type.name} (remove it, then run"
                " `threadwarden setup`)"
            )


def default_registry() -> BindingRegistry:
    """A registry holding the built-in ``scripted`` binding."""
    registry = BindingRegistry()
    registry.register(scripted_binding())
    return registry


def build_worker(
    client: Client,
    pool: asyncpg.Pool[Any],
    settings: Settings,
    registry: BindingRegistry,
    failpoints: Failpoints,
    sinks: Sequence[PublicationSink] = (),
    host: HostMaintenance | None = None,
) -> Worker:
    """The Temporal worker with every workflow and activity of threadwarden."""
    maintenance = Maintenance(pool, settings.timing)
    publications = Publications(pool, [NotifySink(pool), *sinks])
    admissions = Admissions(pool, minimum_alarm_delay_ms=settings.timing.minimum_alarm_delay)
    auxiliary = AuxiliaryActivities(
        publications=publications,
        messages=Messages(pool, admissions),
        projection=Projection(pool, minimum_alarm_delay_ms=settings.timing.minimum_alarm_delay),
        host=host,
        host_work=HostWork(pool, minimum_alarm_delay_ms=settings.timing.minimum_alarm_delay),
        client=client,
        task_queue=settings.task_queue,
        failpoints=failpoints,
        claim_timeout_ms=settings.message_claim_timeout_ms,
        projection_timeout_ms=settings.projection_dispatch_timeout_ms,
    )
    pass_steps = PassSteps(maintenance, failpoints=failpoints, host=host)
    steps = MaintenanceActivities(
        maintenance,
        steps=pass_steps,
        gating=publications.gating,
        host=host,
        failpoints=failpoints,
        limits=PassLimits(
            yield_after_ms=settings.yield_after_ms,
            pass_deadline_ms=settings.pass_deadline_ms,
            head_heartbeat_ms=settings.lease_ms,
            projection_timeout_ms=settings.projection_dispatch_timeout_ms,
        ),
    )
    attempts = AttemptActivities(
        Attempts(pool, lease_ms=settings.lease_ms),
        registry,
        lease_ms=settings.lease_ms,
        lease_renew_ms=settings.lease_renew_ms,
        failpoints=failpoints,
        projection=Projection(pool, minimum_alarm_delay_ms=settings.timing.minimum_alarm_delay),
        publications=publications,
        steps=pass_steps,
    )
    sweep = SweepActivities(
        Sweeps(pool),
        client,
        task_queue=settings.task_queue,
        interval_ms=settings.sweep_interval_ms,
        idle_interval_ms=settings.sweep_idle_interval_ms,
        grace_ms=settings.sweep_grace_ms,
        failpoints=failpoints,
    )
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=[HostWorkflow, SweeperWorkflow],
        # No sandbox at run time: it re-imports the workflow modules for every new run and
        # checks every payload's context, more CPU than a pass itself. Determinism is guarded
        # where it can be proven: the replay tests run every workflow path under the sandbox,
        # and the import contracts keep I/O out of `workflows/`.
        workflow_runner=UnsandboxedWorkflowRunner(),
        # Heartbeats carry cancellation to a running attempt (the pass deadline); the SDK's
        # default throttle (80% of the 30 s heartbeat timeout) would delay it by ~24 s.
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        # Only what the pool can serve inside the timeouts (docs/configuration.md, capacity).
        max_concurrent_workflow_tasks=settings.capacity.workflow_tasks,
        max_concurrent_activities=settings.capacity.activities,
        max_concurrent_local_activities=settings.capacity.local_activities,
        activities=[
            steps.begin_pass,
            steps.prepare_native,
            steps.finish_caught_up,
            steps.finish_pass,
            steps.rearm_failure,
            attempts.run_head,
            auxiliary.drain_publications,
            auxiliary.deliver_messages,
            auxiliary.host_wave,
            auxiliary.backfill_projection,
            sweep.sweep,
        ],
    )


async def start_sweeper(client: Client, task_queue: str) -> None:
    """Ensure the task queue's sweeper runs (a no-op when it already does)."""
    await client.start_workflow(
        c.SWEEPER_WORKFLOW,
        c.SweeperInput(),
        id=c.sweeper_workflow_id(task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
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
) -> AsyncIterator[Worker]:
    """Verify schema and attributes, then run a worker (and the sweeper) until the block exits.

    ``failpoints`` lets tests (threadwarden's and applications') inject faults into passes
    (unset: those the ``failpoints`` setting arms, usually none);
    ``sinks`` are publication sinks besides the built-in Postgres NOTIFY one; ``host`` is the
    application's host-wave plug-in (see `threadwarden.hosts`).
    """
    configure_tracing(settings)
    pool = await create_pool(
        connections.database_url,
        max_size=worker_capacity(settings).pool_size,
        acquire_timeout_ms=settings.pool_acquire_timeout_ms,
    )
    try:
        async with pool.acquire() as conn:
            await verify(conn)
        client = await connect_configured(settings, connections)
        await verify_search_attributes(client)
        worker = build_worker(
            client,
            pool,
            settings,
            registry or default_registry(),
            failpoints or Failpoints.from_spec(settings.failpoints),
            sinks,
            host,
        )
        async with worker:
            await start_sweeper(client, settings.task_queue)
            yield worker
    finally:
        await pool.close()
