"""One chaos run: the stack, the workers, the admissions, the faults, convergence, the check.

Admissions go through `ThreadwardenClient.submit`, in order per thread and concurrently across
threads, at most ``in_flight`` unsettled at a time (so they keep coming while faults strike).
A submit that fails is retried with the same idempotency key until it is admitted. Fault ``i``
of ``k`` strikes once ``(i + 1) / (k + 1)`` of the submissions have settled; between faults, a
worker that exited on its own is started again. Then the run waits (bounded) until every
submission settled and every host is quiet, stops the workers (SIGTERM, timed) and checks the
ledger.

Progress counts the run's own submissions: children (admitted by their parents' calls) and
messages (admitted by deliveries) are waited for through their hosts, which stay unquiet while
one is unsettled or undelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from bench.measure import wait_until
from bench.procs import WorkerCommand
from bench.threadwarden_run import ThreadwardenSide
from chaos import ledger
from chaos.checks import check
from chaos.faults import DEFAULT_FAILPOINTS, Fault, failpoints_fired, inject, plan_faults
from chaos.planned import Planned
from chaos.report import report
from chaos.stack import ChaosStack, chaos_stack
from chaos.workers import ChaosWorkers
from chaos.workload import plan_workload
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.errors import HostMismatch, IdempotencyConflict, InvalidInput

TASK_QUEUE = "chaos"
POLL_S = 0.2
"""Granularity of the progress poll and of a retried submit."""
SUBMIT_TIMEOUT_S = 20.0
"""One submit attempt's bound (a hung one is retried under the same key)."""
QUIET_AFTER_S = 60.0
"""Once all settled, how long the hosts may take to acknowledge and clear their alarms."""
WORKER_ENV = {
    # Quick reclaims after a SIGKILL (the lease is also the head's heartbeat timeout; the
    # killed worker's hosts then wait the sticky timeout for it) and a busy sweeper; slots
    # sized so that every worker's pool fits Postgres' 100 connections.
    "THREADWARDEN_LEASE_MS": "5000",
    "THREADWARDEN_LEASE_RENEW_MS": "1000",
    "THREADWARDEN_STICKY_START_TIMEOUT_MS": "1000",
    "THREADWARDEN_SWEEP_INTERVAL_MS": "500",
    "THREADWARDEN_SWEEP_IDLE_INTERVAL_MS": "5000",
    "THREADWARDEN_SWEEP_GRACE_MS": "1000",
    "THREADWARDEN_MAX_CONCURRENT_ACTIVITIES": "4",
    "THREADWARDEN_MAX_CONCURRENT_LOCAL_ACTIVITIES": "4",
}
MAX_WORKERS = 3
"""Each worker's pool is 26 connections (4 + 4 + 4, plus one per activity poll: 2 of the main
queue and 4 of each agent's two queues, for scripted and the two framework agents): 3 fit
Postgres' 100 beside the run's own."""
REFUSALS = (InvalidInput, IdempotencyConflict, HostMismatch)
"""Submit errors no fault explains: retrying would not help, the run reports them."""


@dataclass(frozen=True)
class Options:
    submissions: int = 1000
    threads: int = 50
    workers: int = 3
    seed: int = 1
    worker_kills: int = 3
    postgres_stops: int = 2
    temporal_kills: int = 1
    deploys: int = 0
    long_send_share: float = 0.0
    """Share of the scripted submissions that send a message, then sleep 10 s (`chaos.workload`);
    the command line's default is 0.15 with ``--deploys``, else 0."""
    failpoints: str = DEFAULT_FAILPOINTS
    in_flight: int = 150
    outage_ms: int = 2000
    timeout_s: float = 900.0
    logs: Path | None = None
    """Keep the stack's data dirs and the worker logs here (default: a temp dir, deleted)."""
    quiet: bool = False


@dataclass
class Outcome:
    """What the run observed besides the ledger check."""

    faults: Counter[str] = field(default_factory=Counter)
    submit_retries: int = 0
    refused: list[str] = field(default_factory=list)
    """Submits refused for a reason no fault explains (a bug, here or in threadwarden)."""
    error: str | None = None


class Progress:
    """Settled submissions, polled from the ledger; waiters wake on every poll."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.settled = 0
        self._polled = asyncio.Condition()

    async def poll(self) -> None:
        conn: asyncpg.Connection[Any] | None = None
        try:
            while True:
                try:
                    if conn is None or conn.is_closed():
                        conn = await asyncpg.connect(self._dsn, timeout=5)
                    self.settled, _ = await ledger.progress(conn)
                except Exception:  # Postgres is down or restarting: keep the last count
                    conn = None
                async with self._polled:
                    self._polled.notify_all()
                await asyncio.sleep(POLL_S)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def until(self, condition: Callable[[], bool]) -> None:
        async with self._polled:
            await self._polled.wait_for(condition)


async def run(options: Options, say: Callable[[str], None]) -> dict[str, Any]:
    """Run the chaos and return the report (see `report`)."""
    started = time.monotonic()
    planned = plan_workload(
        options.submissions, options.threads, options.seed, long_send_share=options.long_send_share
    )
    outcome = Outcome()
    async with chaos_stack(options.logs) as stack:
        workers = ChaosWorkers(_command(stack, options), options.workers, stack.scratch)
        say(f"stack up; starting {options.workers} workers")
        await workers.start()
        try:
            try:
                async with asyncio.timeout(options.timeout_s):
                    await _drive(stack, workers, planned, options, outcome, say)
            except TimeoutError:
                outcome.error = f"not converged within {options.timeout_s:g}s"
        finally:
            await workers.stop()
        async with stack.connect() as conn:
            counts = check(planned, *await ledger.read_ledger(conn))
            unquiet = await ledger.unquiet_hosts(conn)
        fired = failpoints_fired(workers.stderr_files)
    seconds = time.monotonic() - started
    return report(options, counts, outcome, fired, unquiet, workers, seconds)


async def _drive(
    stack: ChaosStack,
    workers: ChaosWorkers,
    planned: Sequence[Planned],
    options: Options,
    outcome: Outcome,
    say: Callable[[str], None],
) -> None:
    progress = Progress(stack.database_url)
    polling = asyncio.create_task(progress.poll())
    settings = Settings(task_queue=TASK_QUEUE)
    connections = Connections(stack.database_url, stack.temporal.address)
    lanes: dict[str, list[Planned]] = {}
    for plan in planned:
        assert plan.thread is not None  # only a child's may be left to threadwarden
        lanes.setdefault(plan.thread, []).append(plan)
    window = _Window(progress, options.in_flight)
    try:
        async with ThreadwardenClient.connect(settings, connections) as client:
            async with asyncio.TaskGroup() as group:  # a deadline cancels every one of them
                for lane in lanes.values():
                    group.create_task(_admit_lane(client, lane, window, outcome))
                group.create_task(_conduct(stack, workers, progress, options, outcome, say))
            say(f"all {len(planned)} admitted; waiting for convergence")
            await progress.until(lambda: progress.settled >= len(planned) - len(outcome.refused))
            await _quiet(stack)
    finally:
        polling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polling


class _Window:
    """Admissions stay at most ``size`` ahead of settlements."""

    def __init__(self, progress: Progress, size: int) -> None:
        self._progress = progress
        self._size = size
        self.admitted = 0

    async def enter(self) -> None:
        await self._progress.until(lambda: self.admitted - self._progress.settled < self._size)
        self.admitted += 1


async def _admit_lane(
    client: ThreadwardenClient, lane: Sequence[Planned], window: _Window, outcome: Outcome
) -> None:
    for plan in lane:
        await window.enter()
        while True:
            try:
                async with asyncio.timeout(SUBMIT_TIMEOUT_S):
                    await client.submit(
                        plan.thread or "",
                        agent_id=plan.agent,
                        input=plan.input,
                        idempotency_key=plan.key,
                        host_id=plan.host,
                    )
                break
            except REFUSALS as error:  # never admitted: the check counts it lost
                outcome.refused.append(f"{plan.key}: {type(error).__name__}: {error}")
                window.admitted -= 1
                break
            except Exception:  # a fault: the same key again, until it is admitted
                outcome.submit_retries += 1
                await asyncio.sleep(POLL_S)


async def _conduct(
    stack: ChaosStack,
    workers: ChaosWorkers,
    progress: Progress,
    options: Options,
    outcome: Outcome,
    say: Callable[[str], None],
) -> None:
    faults: list[Fault] = plan_faults(
        worker_kills=options.worker_kills,
        postgres_stops=options.postgres_stops,
        temporal_kills=options.temporal_kills,
        seed=options.seed,
        deploys=options.deploys,
    )
    victims = random.Random(options.seed + 1)
    for index, fault in enumerate(faults):
        await progress.until(_settled_share(progress, options.submissions, index + 1, len(faults)))
        say(f"fault {index + 1}/{len(faults)}: {fault} at {progress.settled} settled")
        await inject(
            fault,
            stack,
            workers,
            victim=victims.randrange(options.workers),
            outage_s=options.outage_ms / 1000,
        )
        outcome.faults[fault] += 1
        await workers.revive()


def _settled_share(progress: Progress, total: int, nth: int, of: int) -> Callable[[], bool]:
    """Whether ``nth / (of + 1)`` of the ``total`` submissions have settled."""
    threshold = total * nth // (of + 1)
    return lambda: progress.settled >= threshold


async def _quiet(stack: ChaosStack) -> None:
    """Wait until every host acknowledged its work and cleared its alarm (bounded)."""
    async with stack.connect() as conn:
        with contextlib.suppress(TimeoutError):  # reported as unquiet_hosts
            await wait_until(
                lambda: ledger.unquiet_hosts(conn),
                lambda n: n == 0,
                timeout_s=QUIET_AFTER_S,
                what="every host quiet",
            )


def _command(stack: ChaosStack, options: Options) -> Callable[[int, int], WorkerCommand]:
    side = ThreadwardenSide()

    def command(slot: int, incarnation: int) -> WorkerCommand:
        base = side.worker_command(
            stack.database_url, stack.temporal.address, TASK_QUEUE, stack.scratch / f"w{slot}"
        )
        env = {**base.env, **WORKER_ENV}
        if options.failpoints:
            seed = options.seed * 10_000 + slot * 1_000 + incarnation
            env["THREADWARDEN_FAILPOINTS"] = f"{options.failpoints}:seed={seed}"
        # Beside the built-in scripted agent, the framework agents of the workload.
        argv = [*base.argv, "--bindings", "chaos.agents:BINDINGS"]
        return WorkerCommand(argv, env, base.ready)

    return command
