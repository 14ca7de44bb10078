"""threadwarden as a Temporal SDK plugin: register it on your own `Client` (or `Worker`) and the
worker on its task queue runs the host workflows, the sweeper and the pass activities; the head
attempts run on one task queue per agent, polled only by workers that have that binding."""

from __future__ import annotations

import asyncio
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
    PollerBehaviorSimpleMaximum,
    Replayer,
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkerTuner,
)

from threadwarden.activities.attempt import AttemptActivities, HeadRunner
from threadwarden.activities.auxiliary import AuxiliaryActivities
from threadwarden.activities.maintenance import MaintenanceActivities
from threadwarden.activities.pass_steps import PassLimits, PassSteps
from threadwarden.activities.pollers import HeadPollers
from threadwarden.activities.sweep import SweepActivities
from threadwarden.activities.wake import Waker
from threadwarden.bindings import Binding, BindingRegistry
from threadwarden.errors import ThreadwardenError
from threadwarden.failpoints import Failpoints
from threadwarden.hosts import HostMaintenance
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.attempts import Attempts
from threadwarden.ledger.checkpoints import Checkpoints
from threadwarden.ledger.children import Children
from threadwarden.ledger.deltas import Deltas
from threadwarden.ledger.host_work import HostWork
from threadwarden.ledger.maintenance import Maintenance
from threadwarden.ledger.messages import Messages
from threadwarden.ledger.migrations import verify
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.pool import new_pool
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import NotifySink
from threadwarden.ledger.sweep import Sweeps
from threadwarden.publication import PublicationSink
from threadwarden.scripted import scripted_binding
from threadwarden.worker.health import MetricsEndpoint, serving
from threadwarden.worker.metrics import (
    ActivityMetering,
    CountedPublications,
    MeteredRuntime,
    WorkerTelemetry,
    global_metrics,
)
from threadwarden.worker.settings import Settings, worker_capacity
from threadwarden.worker.slots import SharedSlots
from threadwarden.worker.telemetry import interceptors
from threadwarden.workflows import contracts as c
from threadwarden.workflows.host import SEARCH_ATTRIBUTES, HostWorkflow
from threadwarden.workflows.sweeper import SweeperWorkflow

logger = logging.getLogger(__name__)

HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""Longest delay before a heartbeat (and so a cancellation) reaches the server."""
HEAD_POLLERS = 3
"""Activity polls an agent's task queue keeps open (each holds a slot while it waits). Waiting
polls let the server hand a head over at once instead of from its backlog (bench, 4×25: 1 poll
0.37–0.43 of bare Temporal, 5 polls 0.50–0.53)."""
PINNED_POLLERS = 1
"""Activity polls of an agent-at-digest queue (only submissions pinned to a digest use it)."""
MAIN_POLLERS = 2
"""Activity polls of ``threadwarden worker``'s main task queue (only the auxiliary activities
run there: publication, deliveries, host waves, projection backfill)."""


def head_heartbeat_throttle(settings: Settings) -> timedelta:
    """How often a head attempt's heartbeats reach the server at most: every lease renewal,
    and at least every `HEARTBEAT_THROTTLE`.

    The head's heartbeat timeout is the lease (``lease_ms``). The SDK sends heartbeats no more
    often than its throttle; were that 2 s against a 3 s lease, one late second anywhere (the
    event loop, the RPC, a busy server) would time the attempt out. Throttled to the renewal
    interval, the timeout allows as many late beats as the lease allows failed renewals."""
    return min(HEARTBEAT_THROTTLE, timedelta(milliseconds=settings.lease_renew_ms))


def default_registry() -> BindingRegistry:
    """A registry holding the built-in ``scripted`` binding."""
    registry = BindingRegistry()
    registry.register(scripted_binding())
    return registry


def head_queues(task_queue: str, registry: BindingRegistry) -> dict[str, int]:
    """The agent task queues a worker with ``registry`` polls, with their polls: per binding,
    the agent's queue (unpinned submissions) and the agent-at-its-digest queue (submissions
    pinned to it)."""
    queues: dict[str, int] = {}
    for agent_id in registry.agent_ids():
        digest = registry.bindings[agent_id].digest
        queues[c.head_task_queue(task_queue, agent_id)] = HEAD_POLLERS
        queues[c.head_task_queue(task_queue, agent_id, digest)] = PINNED_POLLERS
    return queues


def activity_budget(settings: Settings, registry: BindingRegistry) -> int:
    """Activity slots of one process, shared by the main task queue and the agent queues:
    ``max_concurrent_activities`` plus one per poller, since a waiting poll holds a slot (so an
    idle agent queue never starves a busy one)."""
    pollers = MAIN_POLLERS + sum(head_queues(settings.task_queue, registry).values())
    return worker_capacity(settings).activities + pollers


def pool_size(settings: Settings, registry: BindingRegistry) -> int:
    """Connections a worker's pool needs: one per slot of `activity_budget` and per
    local-activity slot, plus the reserve (`Settings.capacity`). An explicit ``pool_max_size``
    is kept as given; when it is smaller, a worker busy on every queue at once waits for
    connections (up to ``pool_acquire_timeout_ms``, then `PoolExhausted`: the pass retries)."""
    capacity = worker_capacity(settings)
    if settings.pool_max_size is not None:
        return settings.pool_max_size
    return capacity.pool_size + activity_budget(settings, registry) - capacity.activities


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
        c.SWEEPER_WORKFLOW,
        c.SweeperInput(),
        id=c.sweeper_workflow_id(task_queue),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


def pydantic_compatible(converter: DataConverter) -> DataConverter:
    """``converter`` with pydantic payloads (threadwarden's contracts are pydantic models); its
    codec and failure converter kept."""
    if converter.payload_converter_class is DefaultPayloadConverter:
        return dataclasses.replace(converter, payload_converter_class=PydanticPayloadConverter)
    return converter


@dataclasses.dataclass
class _Assembly:
    """One worker's threadwarden parts, built with its client and pool."""

    pool: asyncpg.Pool[Any]
    owns_pool: bool
    main: list[Callable[..., Any]]
    run_head: Callable[..., Any]
    telemetry: WorkerTelemetry | None = None
    """The worker's own metrics pipeline, when ``metrics_address`` asks for an endpoint."""


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
        self._database = database
        self._sinks = list(sinks)
        self._host = host
        self._failpoints = failpoints or Failpoints.from_spec(self.settings.failpoints)
        self._sweeper = sweeper
        self.activity_slots = SharedSlots(activity_budget(self.settings, self.registry))
        """The process's activity slots: the agent queues' workers take theirs from here, and a
        main worker may too (``threadwarden worker`` does, through `tuner`)."""
        self._assemblies: list[_Assembly] = []

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
        assembly = self._assemble(client)
        self._assemblies.append(assembly)
        config["activities"] = [*config.get("activities", []), *assembly.main]
        config["workflows"] = [*config.get("workflows", []), HostWorkflow, SweeperWorkflow]
        # Heartbeats carry cancellation to a running attempt (the pass deadline); the SDK's
        # default throttle (80% of the heartbeat timeout) would delay it by ~24 s.
        throttle = config.get("max_heartbeat_throttle_interval") or timedelta(seconds=60)
        config["max_heartbeat_throttle_interval"] = min(throttle, HEARTBEAT_THROTTLE)
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
        self, worker: Worker, assembly: _Assembly, next: Callable[[Worker], Awaitable[None]]
    ) -> None:
        client = worker.client
        if assembly.owns_pool:
            await assembly.pool  # opened here, where the worker's loop runs
        async with assembly.pool.acquire() as conn:
            await verify(conn)
        await verify_search_attributes(client)
        async with contextlib.AsyncExitStack() as stack:
            heads = [
                self._head_worker(client, queue, polls, assembly)
                for queue, polls in head_queues(self.task_queue, self.registry).items()
            ]
            for head in heads:
                await stack.enter_async_context(head)
            _stop_heads_with(worker, heads)
            if self._sweeper:
                await start_sweeper(client, self.task_queue)
            await self._serve_metrics(stack, worker, assembly)
            await next(worker)

    async def _serve_metrics(
        self, stack: contextlib.AsyncExitStack, worker: Worker, assembly: _Assembly
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

    def _head_worker(self, client: Client, queue: str, polls: int, assembly: _Assembly) -> Worker:
        return Worker(
            client,
            task_queue=queue,
            activities=[assembly.run_head],
            tuner=WorkerTuner.create_composite(
                workflow_supplier=FixedSizeSlotSupplier(1),
                activity_supplier=self.activity_slots,
                local_activity_supplier=FixedSizeSlotSupplier(1),
                nexus_supplier=FixedSizeSlotSupplier(1),
            ),
            activity_task_poller_behavior=PollerBehaviorSimpleMaximum(polls),
            max_cached_workflows=0,
            max_heartbeat_throttle_interval=head_heartbeat_throttle(self.settings),
        )

    def _assemble(self, client: Client) -> _Assembly:
        settings = self.settings
        owns = isinstance(self._database, str)
        pool: asyncpg.Pool[Any]
        if isinstance(self._database, str):
            pool = new_pool(
                self._database,
                max_size=pool_size(settings, self.registry),
                acquire_timeout_ms=settings.pool_acquire_timeout_ms,
            )
        else:
            pool = self._database
        delay = settings.timing.minimum_alarm_delay
        failpoints = self._failpoints
        telemetry = None
        if settings.metrics_bind is not None:
            interval_s = settings.metrics_gauge_interval_ms / 1000
            telemetry = WorkerTelemetry(pool, gauge_interval_s=interval_s)
        metering = ActivityMetering(
            telemetry.domain if telemetry else global_metrics(),
            pass_deadline_ms=settings.pass_deadline_ms,
        )
        maintenance = Maintenance(pool, settings.timing)
        publications = CountedPublications(pool, [NotifySink(pool), *self._sinks], metering.domain)
        admissions = Admissions(pool, minimum_alarm_delay_ms=delay)
        auxiliary = AuxiliaryActivities(
            publications=publications,
            messages=Messages(pool, admissions),
            projection=Projection(pool, minimum_alarm_delay_ms=delay),
            host=self._host,
            host_work=HostWork(pool, minimum_alarm_delay_ms=delay),
            client=client,
            task_queue=settings.task_queue,
            failpoints=failpoints,
            claim_timeout_ms=settings.message_claim_timeout_ms,
            projection_timeout_ms=settings.projection_dispatch_timeout_ms,
        )
        waker = Waker(client, task_queue=settings.task_queue)
        pass_steps = PassSteps(
            maintenance,
            failpoints=failpoints,
            host=self._host,
            limits=PassLimits(
                yield_after_ms=settings.yield_after_ms,
                pass_deadline_ms=settings.pass_deadline_ms,
                head_heartbeat_ms=settings.lease_ms,
                head_start_ms=settings.head_start_timeout_ms,
                projection_timeout_ms=settings.projection_dispatch_timeout_ms,
                inline_budget_ms=settings.inline_budget_ms,
            ),
            waker=waker,
            pollers=HeadPollers(
                client,
                task_queue=settings.task_queue,
                local=head_queues(settings.task_queue, self.registry),
            ),
            inline={b.agent_id: b.digest for b in self.registry.bindings.values() if b.inline},
        )
        runner = HeadRunner(
            Attempts(pool, lease_ms=settings.lease_ms, minimum_alarm_delay_ms=delay),
            self.registry,
            lease_ms=settings.lease_ms,
            lease_renew_ms=settings.lease_renew_ms,
            failpoints=failpoints,
            projection=Projection(pool, minimum_alarm_delay_ms=delay),
            publications=publications,
            steps=pass_steps,
            children=Children(pool, admissions, minimum_alarm_delay_ms=delay),
            operator=Operator(pool, minimum_alarm_delay_ms=delay),
            waker=waker,
            checkpoints=Checkpoints(pool),
            deltas=Deltas(pool) if settings.live_text else None,
        )
        steps = MaintenanceActivities(
            maintenance,
            steps=pass_steps,
            runner=runner,
            gating=publications.gating,
            host=self._host,
            failpoints=failpoints,
        )
        attempts = AttemptActivities(runner)
        sweep = SweepActivities(
            Sweeps(pool),
            client,
            task_queue=settings.task_queue,
            interval_ms=settings.sweep_interval_ms,
            idle_interval_ms=settings.sweep_idle_interval_ms,
            grace_ms=settings.sweep_grace_ms,
            failpoints=failpoints,
        )
        main: list[Callable[..., Any]] = [
            steps.begin_pass,
            steps.prepare_native,
            steps.head_unstarted,
            steps.finish_caught_up,
            steps.finish_pass,
            steps.rearm_failure,
            auxiliary.drain_publications,
            auxiliary.deliver_messages,
            auxiliary.host_wave,
            auxiliary.backfill_projection,
            sweep.sweep,
        ]
        run_head = metering.wrap(attempts.run_head)
        return _Assembly(
            pool,
            owns,
            # run_head on the main worker too: its inline heads run there as local activities.
            [*(metering.wrap(fn) for fn in main), run_head],
            run_head,
            telemetry,
        )

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
