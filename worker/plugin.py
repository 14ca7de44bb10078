"""threadwarden as a Temporal SDK plugin: register it on your own `Client` (or `Worker`) and the
worker on its task queue runs the host workflows, the sweeper and the pass activities; the head
attempts run on one task queue per agent, polled only by workers that have that binding."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import temporalio.client
import temporalio.worker
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, ClientConfig
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.service import ConnectConfig, ServiceClient
from temporalio.worker import (
    FixedSizeSlotSupplier,
    Replayer,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkerTuner,
)

from threadwarden.bindings import Binding, BindingRegistry
from threadwarden.config.settings import Settings, worker_capacity
from threadwarden.config.tracing import interceptors
from threadwarden.errors import ThreadwardenError
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.migrations import verify
from threadwarden.publication import PublicationSink
from threadwarden.scripted import scripted_binding
from threadwarden.worker.assembly import Assembler, Assembly
from threadwarden.worker.capacity import activity_budget, head_queues
from threadwarden.worker.head_workers import HEARTBEAT_THROTTLE, running_heads
from threadwarden.worker.health import MetricsEndpoint, serving
from threadwarden.worker.metrics import MeteredRuntime
from threadwarden.worker.slots import SharedSlots
from threadwarden.workflows import auxiliary_contracts, contracts
from threadwarden.workflows.host import SEARCH_ATTRIBUTES, HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow

logger = logging.getLogger(__name__)


def default_registry() -> BindingRegistry:
    """A registry holding the built-in ``scripted`` binding."""
    registry = BindingRegistry()
    registry.register(scripted_binding())
    return registry


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


async def start_sweeper(client: Client, task_queue: str) -> None:
    """Ensure the task queue's sweeper runs (a no-op when it already does)."""
    await client.start_workflow(
        contracts.SWEEPER_WORKFLOW,
        auxiliary_contracts.SweeperInput(),
        id=contracts.sweeper_workflow_id(task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


def pydantic_compatible(converter: DataConverter) -> DataConverter:
    """``converter`` with pydantic payloads (threadwarden's contracts are pydantic models); its
    codec and failure converter kept."""
    if converter.payload_converter_class is DefaultPayloadConverter:
        return dataclasses.replace(converter, payload_converter_class=PydanticPayloadConverter)
    return converter


class ThreadwardenPlugin(temporalio.client.Plugin, temporalio.worker.Plugin):
    """Registers threadwarden on a Temporal application's own client and worker.

    ``Client.connect(..., plugins=[ThreadwardenPlugin(...)])`` gives the client the pydantic
    payload converter and the tracing interceptor; every ``Worker`` built on that client whose
    task queue is ``settings.task_queue`` then also runs the host workflows, the sweeper and the
    pass activities, and while it runs, one small worker per agent queue of ``bindings`` runs
    the head attempts (docs/architecture.md, binding-aware routing). Workers on other task
    queues are left as they are.

    ``bindings``: a registry or bindings (default: the built-in ``scripted`` one).
    ``database``: a DSN (the plugin opens and closes a pool) or a pool of yours built with
    ``threadwarden.ledger.pool.create_pool`` (left open); default ``settings.database_url``.
    ``settings``: default ``Settings()``, the ``THREADWARDEN_*`` environment. ``sinks`` and
    ``host``: publication sinks and the host-wave plug-in. ``failpoints``: for fault tests.
    ``sweeper``: start the task queue's sweeper when the worker starts (default true).
    """

    def __init__(
        self,
        *,
        bindings: BindingRegistry | Iterable[Binding] | None = None,
        database: str | asyncpg.Pool[Any] | None = None,
        settings: Settings | None = None,
        sinks: Sequence[PublicationSink] = (),
        host: HostMaintenance | None = None,
        failpoints: Failpoints | None = None,
        sweeper: bool = True,
    ) -> None:
        self.settings = settings or Settings()
        if bindings is None:
            self.registry = default_registry()
        elif isinstance(bindings, BindingRegistry):
            self.registry = bindings
        else:
            self.registry = BindingRegistry()
            for binding in bindings:
                self.registry.register(binding)
        if database is None:
            if self.settings.database_url is None:
                raise ThreadwardenError(
                    "database: expected a DSN or a pool (or THREADWARDEN_DATABASE_URL)"
                )
            database = self.settings.database_url.get_secret_value()
        self._assembler = Assembler(
            settings=self.settings,
            registry=self.registry,
            database=database,
            sinks=list(sinks),
            host=host,
            failpoints=failpoints or Failpoints.from_spec(self.settings.failpoints),
        )
        self._sweeper = sweeper
        self.activity_slots = SharedSlots(activity_budget(self.settings, self.registry))
        """The process's activity slots: the agent queues' workers take theirs from here, and a
        main worker may too (``threadwarden worker`` does, through `tuner`)."""
        self._assemblies: list[Assembly] = []

    def name(self) -> str:
        return "threadwarden"

    @property
    def task_queue(self) -> str:
        return self.settings.task_queue

    def tuner(self) -> WorkerTuner:
        """Slots for the main worker that share `activity_slots` with the agent queues."""
        capacity = worker_capacity(self.settings)
        return WorkerTuner.create_composite(
            workflow_supplier=FixedSizeSlotSupplier(capacity.workflow_tasks),
            activity_supplier=self.activity_slots,
            local_activity_supplier=FixedSizeSlotSupplier(capacity.local_activities),
            nexus_supplier=FixedSizeSlotSupplier(1),
        )

    # -- client -------------------------------------------------------------------------------

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config["data_converter"] = pydantic_compatible(
            config.get("data_converter") or DataConverter.default
        )
        config["interceptors"] = [*config.get("interceptors", []), *interceptors()]
        return config

    async def connect_service_client(
        self, config: ConnectConfig, next: Callable[[ConnectConfig], Awaitable[ServiceClient]]
    ) -> ServiceClient:
        return await next(config)

    # -- worker -------------------------------------------------------------------------------

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        if config.get("task_queue") != self.task_queue:
            return config  # another of the application's workers (or an agent queue's)
        if HostWorkflow in config.get("workflows", []):
            return config  # registered on both the client and the worker: configured once
        client = config["client"]
        converter = client.data_converter.payload_converter_class
        if converter is DefaultPayloadConverter:
            raise ThreadwardenError(
                "ThreadwardenPlugin: the worker's client has the default payload converter;"
                " register the plugin on the Client (Client.connect(..., plugins=[plugin]))"
            )
        assembly = self._assembler.assemble(client)
        self._assemblies.append(assembly)
        config["activities"] = [*config.get("activities", []), *assembly.main]
        config["workflows"] = [*config.get("workflows", []), HostWorkflow, SweeperWorkflow]
        # Heartbeats carry cancellation to a running attempt (the pass deadline); the SDK's
        # default throttle (80% of the heartbeat timeout) would delay it by ~24 s.
        throttle = config.get("max_heartbeat_throttle_interval") or timedelta(seconds=60)
        config["max_heartbeat_throttle_interval"] = min(throttle, HEARTBEAT_THROTTLE)
        # A dead worker's hosts wait this long on its sticky queue before another worker
        # takes their next task (after their heads' heartbeat timeout).
        config["sticky_queue_schedule_to_start_timeout"] = timedelta(
            milliseconds=self.settings.sticky_start_timeout_ms
        )
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        activities = worker.config(active_config=True).get("activities", [])
        mine = [a for a in self._assemblies if a.main[0] in activities]
        if not mine:  # not a worker this plugin configured
            await next(worker)
            return
        assembly = mine[0]
        self._assemblies.remove(assembly)
        try:
            await self._run(worker, assembly, next)
        finally:
            if assembly.owns_pool:
                await assembly.pool.close()

    async def _run(
        self, worker: Worker, assembly: Assembly, next: Callable[[Worker], Awaitable[None]]
    ) -> None:
        client = worker.client
        if assembly.owns_pool:
            await assembly.pool  # opened here, where the worker's loop runs
        async with assembly.pool.acquire() as conn:
            await verify(conn)
        await verify_search_attributes(client)
        async with contextlib.AsyncExitStack() as stack:
            heads = running_heads(
                worker,
                head_queues(self.task_queue, self.registry),
                run_head=assembly.run_head,
                slots=self.activity_slots,
                settings=self.settings,
            )
            await stack.enter_async_context(heads)
            if self._sweeper:
                await start_sweeper(client, self.task_queue)
            await self._serve_metrics(stack, worker, assembly)
            await next(worker)

    async def _serve_metrics(
        self, stack: contextlib.AsyncExitStack, worker: Worker, assembly: Assembly
    ) -> None:
        """The worker's endpoint (with the Temporal SDK's metrics appended, when its client's
        runtime renders them) until the worker stops."""
        telemetry, bind = assembly.telemetry, self.settings.metrics_bind
        if telemetry is None or bind is None:
            return
        stack.callback(telemetry.shutdown)
        runtime = worker.client.service_client.config.runtime
        endpoint = MetricsEndpoint(
            telemetry,
            assembly.pool,
            ready=lambda: worker.is_running,
            sdk_metrics=runtime.sdk_metrics_address
            if isinstance(runtime, MeteredRuntime)
            else None,
        )
        await stack.enter_async_context(serving(endpoint, bind))

    # -- replayer -----------------------------------------------------------------------------

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config["data_converter"] = pydantic_compatible(
            config.get("data_converter") or DataConverter.default
        )
        config["workflows"] = [*config.get("workflows", []), HostWorkflow, SweeperWorkflow]
        return config

    @contextlib.asynccontextmanager
    async def run_replayer(
        self,
        replayer: Replayer,
        histories: Any,
        next: Callable[[Replayer, Any], contextlib.AbstractAsyncContextManager[Any]],
    ) -> Any:
        async with next(replayer, histories) as results:
            yield results
