"""The activities a threadwarden worker registers: the ledger's repositories on one pool, the
activity instances built on them (each taking its dependencies in its constructor), and the
metering that wraps each activity. `ThreadwardenPlugin` assembles one set per worker it joins."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
from temporalio.client import Client

from threadwarden.activities.attempt import AttemptActivities, HeadRunner
from threadwarden.activities.auxiliary import AuxiliaryActivities
from threadwarden.activities.maintenance import MaintenanceActivities, task_break
from threadwarden.activities.pass_steps import PassLimits, PassSteps
from threadwarden.activities.pollers import HeadPollers
from threadwarden.activities.quick_heads import QuickHeads
from threadwarden.activities.sweep import SweepActivities
from threadwarden.activities.wake import Waker
from threadwarden.bindings import BindingRegistry
from threadwarden.config.settings import Settings
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
from threadwarden.ledger.operator import Operator
from threadwarden.ledger.pool import new_pool
from threadwarden.ledger.projection import Projection
from threadwarden.ledger.publication import NotifySink
from threadwarden.ledger.sweep import Sweeps
from threadwarden.publication import PublicationSink
from threadwarden.worker.capacity import head_queues, pool_size
from threadwarden.worker.metrics import (
    ActivityMetering,
    CountedPublications,
    WorkerTelemetry,
    global_metrics,
)


@dataclasses.dataclass
class Assembly:
    """One worker's threadwarden parts, built with its client and pool."""

    pool: asyncpg.Pool[Any]
    owns_pool: bool
    """The pool was opened from a DSN for this worker (its runner opens and closes it)."""
    main: list[Callable[..., Any]]
    """The main task queue's activities, metered."""
    run_head: Callable[..., Any]
    """The head attempt, metered: the agent queues' workers run it."""
    telemetry: WorkerTelemetry | None = None
    """The worker's own metrics pipeline, when ``metrics_address`` asks for an endpoint."""


@dataclasses.dataclass(frozen=True)
class Assembler:
    """What the activities of every worker a plugin joins are built from."""

    settings: Settings
    registry: BindingRegistry
    database: str | asyncpg.Pool[Any]
    """A DSN (each worker gets a pool sized by `pool_size`, opened by the worker's runner) or
    the application's pool (shared, left open)."""
    sinks: Sequence[PublicationSink]
    host: HostMaintenance | None
    failpoints: Failpoints

    def assemble(self, client: Client) -> Assembly:
        """The activities of one worker on ``client``."""
        settings, registry, database = self.settings, self.registry, self.database
        host, failpoints = self.host, self.failpoints
        pool: asyncpg.Pool[Any]
        if isinstance(database, str):
            pool = new_pool(
                database,
                max_size=pool_size(settings, registry),
                acquire_timeout_ms=settings.pool_acquire_timeout_ms,
            )
        else:
            pool = database
        delay = settings.timing.minimum_alarm_delay
        telemetry = None
        if settings.metrics_bind is not None:
            interval_s = settings.metrics_gauge_interval_ms / 1000
            telemetry = WorkerTelemetry(pool, gauge_interval_s=interval_s)
        metering = ActivityMetering(
            telemetry.domain if telemetry else global_metrics(),
            pass_deadline_ms=settings.pass_deadline_ms,
        )
        maintenance = Maintenance(pool, settings.timing)
        publications = CountedPublications(pool, [NotifySink(pool), *self.sinks], metering.domain)
        admissions = Admissions(pool, minimum_alarm_delay_ms=delay)
        auxiliary = AuxiliaryActivities(
            publications=publications,
            messages=Messages(pool, admissions),
            projection=Projection(pool, minimum_alarm_delay_ms=delay),
            host=host,
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
            host=host,
            limits=PassLimits(
                yield_after_ms=settings.yield_after_ms,
                pass_deadline_ms=settings.pass_deadline_ms,
                head_heartbeat_ms=settings.lease_ms,
                head_start_ms=settings.head_start_timeout_ms,
                projection_timeout_ms=settings.projection_dispatch_timeout_ms,
                inline_budget_ms=settings.inline_budget_ms,
                idle_linger_ms=settings.idle_linger_ms,
            ),
            waker=waker,
            pollers=HeadPollers(
                client,
                task_queue=settings.task_queue,
                local=head_queues(settings.task_queue, registry),
            ),
            bindings={b.agent_id: b.digest for b in registry.bindings.values()},
            inline=frozenset(b.agent_id for b in registry.bindings.values() if b.inline),
            quick=QuickHeads(
                quick_ms=settings.inline_quick_ms, budget_ms=settings.inline_budget_ms
            ),
        )
        runner = HeadRunner(
            Attempts(pool, lease_ms=settings.lease_ms, minimum_alarm_delay_ms=delay),
            registry,
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
            host=host,
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
        return Assembly(
            pool,
            owns_pool=isinstance(database, str),
            # run_head on the main worker too: its inline heads run there as local activities;
            # task_break does nothing (unmetered): the host awaits it to end a workflow task.
            main=[*(metering.wrap(fn) for fn in main), run_head, task_break],
            run_head=run_head,
            telemetry=telemetry,
        )
