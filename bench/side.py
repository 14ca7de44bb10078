"""One measured side of one repetition, the same steps for threadwarden and the baseline.

1. A fresh database and task queue; the side's worker processes start and report ready.
2. Warm-up: 1 host × 1 unit, until settled and its workflow closed (not measured).
3. The workers stop; once no session is left on the database its counters are read and
   ``pg_stat_statements`` is reset. Fresh worker processes start on the same task queue.
4. Measured: H hosts × N units submitted in order per host, concurrently across hosts, the
   submit time of each unit taken just before its call. The clock runs from the first submit
   until one count query (every `POLL_INTERVAL_S`) sees every unit settled.
5. Quiescence: every measured host's workflow closes (bounded); then the workers stop, the SQL
   counts are read, and the task queue's histories are fetched and counted.

A side may run processes beside its measured run (`Side.alongside`: threadwarden's console and
event streams of ``--streams``): started before the clock, their CPU reported apart, their
figures taken once the hosts' workflows closed, stopped before the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncpg
from temporalio.client import Client

from bench import cpu, history, sqlstats
from bench.measure import SideRun, wait_until
from bench.procs import WorkerCommand, WorkerDied, WorkerGroup, log_counts, worker_group
from bench.stack import BenchStack, connected

logger = logging.getLogger(__name__)

QUIESCE_DEADLINE_S = 60.0


class Driver(Protocol):
    """The client half of a side, in the bench process."""

    async def submit(self, host: str, seq: int) -> str:
        """Submit unit ``seq`` of ``host``; return the key its completion row carries."""
        ...


class Alongside(Protocol):
    """Processes running beside a side's measured run (`Side.alongside`)."""

    @property
    def pids(self) -> dict[str, list[int]]:
        """Their CPU groups (`bench.cpu`), reported apart from the measured processes'."""
        ...

    async def finish(
        self, observer: asyncpg.Connection[Any], hosts: Sequence[str]
    ) -> dict[str, Any]:
        """Their figures, once the hosts' workflows closed (`SideRun.streams`)."""
        ...


class Side(Protocol):
    name: str
    count_sql: str
    """One count of settled units of the hosts ``$1`` (the completion poll)."""
    completions_sql: str
    """Rows (key, done_at, ok) of the settled units of the hosts ``$1``."""

    async def prepare(self, dsn: str) -> None: ...

    def worker_command(
        self, dsn: str, temporal_address: str, task_queue: str, data_dir: Path
    ) -> WorkerCommand: ...

    def driver(
        self, dsn: str, temporal_address: str, task_queue: str, submissions: int
    ) -> AbstractAsyncContextManager[Driver]:
        """The client, for hosts of ``submissions`` units each."""
        ...

    def alongside(
        self, dsn: str, temporal_address: str, hosts: Sequence[str], logs: Path
    ) -> AbstractAsyncContextManager[Alongside | None]:
        """What runs beside the measured run of ``hosts`` (None: nothing)."""
        ...

    def workflow_id(self, host: str) -> str: ...

    def sweeper_id(self, task_queue: str) -> str: ...


@dataclass(frozen=True)
class Shape:
    hosts: int
    submissions: int
    workers: int
    timeout_s: float
    top: int = 0


async def run_side(
    stack: BenchStack, side: Side, shape: Shape, *, rep: int, temporal: Client, logs: Path
) -> SideRun:
    """Warm up, then measure ``shape`` on ``side`` (see the module docstring)."""
    tag = f"{side.name}-r{rep}-{uuid.uuid4().hex[:6]}"
    database = tag.replace("-", "_")
    runner = _Runner(stack, side, shape, temporal, database, f"bench-{tag}", logs / tag)
    await stack.fresh_database(database)
    await side.prepare(runner.dsn)
    await runner.warm_up(f"w-{tag}")
    run = SideRun(side.name, shape.hosts * shape.submissions)
    hosts = [f"{tag}-h{n}" for n in range(shape.hosts)]
    async with stack.admin() as admin:
        before = await sqlstats.quiet_counters(admin, database)
        await sqlstats.reset(admin)
        await runner.measure(hosts, run)
        after = await sqlstats.quiet_counters(admin, database)
        counted = await sqlstats.statements(admin, database, top=shape.top)
    run.statements = counted.statements
    run.transactions = sqlstats.transactions(
        before, after, counted.observer_calls + counted.console_calls
    )
    if run.streams is not None:
        run.streams["console_sql_statements"] = counted.console_calls
    run.pool_resets = counted.pool_resets
    run.top_statements = counted.top
    await runner.histories(hosts, run)
    return run


@dataclass(frozen=True)
class _Runner:
    stack: BenchStack
    side: Side
    shape: Shape
    temporal: Client
    database: str
    task_queue: str
    data_dir: Path

    @property
    def dsn(self) -> str:
        return self.stack.dsn(self.database)

    @property
    def command(self) -> WorkerCommand:
        return self.side.worker_command(
            self.dsn, self.stack.temporal_address, self.task_queue, self.data_dir
        )

    @contextlib.asynccontextmanager
    async def running(
        self, phase: str, submissions: int
    ) -> AsyncIterator[tuple[WorkerGroup, Driver, asyncpg.Connection[Any]]]:
        """Worker processes, the side's client and an observer connection, for one phase."""
        async with (
            worker_group(self.command, self.shape.workers, self.data_dir / phase) as group,
            self.side.driver(
                self.dsn, self.stack.temporal_address, self.task_queue, submissions
            ) as driver,
            connected(self.stack.observer_dsn(self.database)) as observer,
        ):
            yield group, driver, observer

    async def warm_up(self, host: str) -> None:
        """1×1, not measured; its workers then stop, so its statistics are flushed."""
        warm = SideRun(self.side.name, 1)
        shape = Shape(1, 1, self.shape.workers, self.shape.timeout_s)
        async with self.running("warmup", 1) as (group, driver, observer):
            await _drive(self.side, driver, observer, group, [host], shape, warm, {})
            if warm.error is not None:
                raise RuntimeError(f"{self.side.name} warm-up failed: {warm.error}")
            await _quiesce(self.temporal, [self.side.workflow_id(host)])

    async def measure(self, hosts: list[str], run: SideRun) -> None:
        issued: dict[str, float] = {}
        async with (
            self.running("run", self.shape.submissions) as (group, driver, observer),
            self.side.alongside(
                self.dsn, self.stack.temporal_address, hosts, self.data_dir / "run"
            ) as beside,
        ):
            processes = {"workers": group.pids, **self.stack.server_pids()}
            if beside is not None:
                processes.update(beside.pids)
            before = cpu.snapshot(processes, alone=[os.getpid()])
            await _drive(self.side, driver, observer, group, hosts, self.shape, run, issued)
            if run.error is None:
                await _quiesce(self.temporal, [self.side.workflow_id(h) for h in hosts])
            # Before the workers stop (their time would move to the bench's own children).
            run.cpu_s = cpu.used(before, cpu.snapshot(processes, alone=[os.getpid()]))
            if beside is not None:
                run.streams = await beside.finish(observer, hosts)
            await _completions(self.side, observer, hosts, issued, run)
        run.log_timeout_lines, run.failed_passes = log_counts(group.stderr_files)

    async def histories(self, hosts: list[str], run: SideRun) -> None:
        measured = {self.side.workflow_id(h) for h in hosts}
        sweeper = self.side.sweeper_id(self.task_queue)
        expected = measured if run.error is None else set()
        runs = await history.list_runs(self.temporal, self.task_queue, expected)
        run.history = await history.count(
            self.temporal, runs, measured=measured.__contains__, sweeper=sweeper
        )
        await history.terminate_open(self.temporal, runs)


class Measured(Protocol):
    """A repetition's figures that `drive` fills (`SideRun`, the agent shape's `AgentRun`)."""

    units: int
    seconds: float
    error: str | None


async def drive(
    submit_all: Callable[[], Awaitable[None]],
    count_settled: Callable[[], Awaitable[int]],
    group: WorkerGroup,
    run: Measured,
    *,
    timeout_s: float,
    unit: str = "units",
) -> None:
    """Submit every unit (``submit_all``), then poll ``count_settled`` until all ``run.units``
    are settled, within ``timeout_s`` of the first submit: ``run.seconds`` from that submit to
    the poll that saw the last unit settled, or ``run.error`` (the deadline, a worker died)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = -1  # settled units at the last poll; -1 while still submitting

    async def settled() -> int:
        nonlocal last
        group.check()
        last = await count_settled()
        return last

    started = time.perf_counter()
    try:
        async with asyncio.timeout_at(deadline):
            await submit_all()
        remaining = max(deadline - loop.time(), 0.0)
        await wait_until(settled, lambda n: n >= run.units, timeout_s=remaining, what="all settled")
    except TimeoutError:
        done = f"{last}/{run.units} {unit} settled" if last >= 0 else "still submitting"
        run.error = f"timeout: {done} after {timeout_s:g}s"
    except WorkerDied as error:
        run.error = f"WorkerDied: {error}"
    run.seconds = time.perf_counter() - started


async def _drive(
    side: Side,
    driver: Driver,
    observer: asyncpg.Connection[Any],
    group: WorkerGroup,
    hosts: Sequence[str],
    shape: Shape,
    run: SideRun,
    issued: dict[str, float],
) -> None:
    """Submit every unit, in order per host, each one's submit time in ``issued``; then poll
    the side's one count query until all are settled or time is up (`drive`)."""

    async def submit_all(host: str) -> None:
        for seq in range(shape.submissions):
            at = time.time()
            issued[await driver.submit(host, seq)] = at

    async def every_host() -> None:
        await asyncio.gather(*(submit_all(h) for h in hosts))

    async def settled() -> int:
        return int(await observer.fetchval(side.count_sql, list(hosts)))

    await drive(every_host, settled, group, run, timeout_s=shape.timeout_s)


async def _quiesce(temporal: Client, workflow_ids: Sequence[str]) -> None:
    """Wait (bounded) until each workflow's latest run has closed."""

    async def closed(workflow_id: str) -> None:
        with contextlib.suppress(Exception):  # failed or terminated is closed too
            await temporal.get_workflow_handle(workflow_id).result()

    try:
        async with asyncio.timeout(QUIESCE_DEADLINE_S):
            await asyncio.gather(*(closed(w) for w in workflow_ids))
    except TimeoutError:
        print(f"bench: warning: workflows still open after {QUIESCE_DEADLINE_S}s", file=sys.stderr)


async def _completions(
    side: Side,
    observer: asyncpg.Connection[Any],
    hosts: list[str],
    issued: dict[str, float],
    run: SideRun,
) -> None:
    """Per-unit latency (DB completion time − client submit time) and the outcome check."""
    rows = await observer.fetch(side.completions_sql, hosts)
    ok = [r for r in rows if r["ok"]]
    run.completed = len(ok)
    run.latencies_ms = [
        (r["done_at"].timestamp() - issued[r["key"]]) * 1000 for r in ok if r["key"] in issued
    ]
    if len(ok) < len(rows):
        bad = f"{len(rows) - len(ok)} unit(s) settled with another outcome than completed"
        run.error = bad if run.error is None else f"{run.error}; {bad}"
