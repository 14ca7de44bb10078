"""The long-thread shape's three sides (``python -m bench --shape long-thread``, issue 37 item 6):
one thread of N turns, one turn after another, each adding ~1 KB of conversation, the same offline
model on every side (bench/long_support.py).

- *threadwarden*: one ``threadwarden worker --bindings bench.long_support:bindings`` process on
  a fresh database: the pydantic-ai binding with a memory budget (`long_support.BUDGET_TOKENS`,
  ``keep_turns`` `long_support.KEEP_TURNS`). Each turn is submitted once the
  previous one settled; its latency runs from just before the submit to ``settled_at``.
- *bare*: the same agent in this process, ``agent.run`` with the whole message history carried in
  memory; its latency is the call's.
- *langgraph_postgres*: a LangGraph agent checkpointed by ``PostgresSaver`` on a fresh database of
  the same PostgreSQL (bench/long_graph.py); its latency is ``graph.invoke``'s.

The turns are cut into ten deciles. At each decile's edge the bench reads what the side had
PostgreSQL do so far (`bench.sqlstats.written`: statements, their WAL bytes, the tables' size);
a decile's figures are the differences, per turn. The last decile's edge waits until the
threadwarden host is idle, so that work trailing a turn is counted in every decile.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from bench import history, sqlstats
from bench.agent_sides import hosts_idle
from bench.long_support import (
    AGENT,
    BUDGET_ENV,
    BUDGET_TOKENS,
    WARM_UP,
    long_thread_agent,
    prompt,
)
from bench.measure import wait_until
from bench.procs import WorkerCommand, WorkerGroup, worker_group
from bench.stack import BenchStack, bench_stack, connected
from bench.threadwarden_run import ThreadwardenSide, migrate_ledger
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings

DECILES = 10
SIDES = ("threadwarden", "bare", "langgraph_postgres")
_SETTLED = (
    "SELECT outcome, extract(epoch FROM settled_at)::float8 AS at"
    "  FROM threadwarden.submissions WHERE submission_id = $1 AND state = 'settled'"
)
_RECORDS = (
    "SELECT count(*) AS records, count(*) FILTER (WHERE kind = 'summary') AS summaries"
    "  FROM threadwarden.records WHERE thread_id = $1"
)


@dataclass(frozen=True)
class LongShape:
    turns: int
    timeout_s: float
    """The deadline of one turn."""
    budget_tokens: int = BUDGET_TOKENS


@dataclass
class LongRun:
    """What one side measured: each turn's latency and, at each decile's edge, `Written`."""

    side: str
    turns: int
    latencies_ms: list[float] = field(default_factory=list)
    edges: list[sqlstats.Written] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    records: dict[str, int] | None = None
    """threadwarden: the thread's ``records`` and ``summaries`` (records of that kind) at the
    end."""

    @property
    def completed(self) -> int:
        return len(self.latencies_ms)


def decile_edges(turns: int) -> list[int]:
    """The first turn of each decile, then ``turns``."""
    return [k * turns // DECILES for k in range(DECILES + 1)]


Turn = Callable[[int], Awaitable[float]]
"""Runs turn n of the thread; its latency in ms."""


async def measure(
    run: LongRun,
    turn: Turn,
    written: Callable[[], Awaitable[sqlstats.Written]],
    *,
    settle: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Every turn in order, `Written` at each decile's edge (after ``settle`` at the last one).
    A turn that fails ends the run: ``run.error``, the figures so far kept."""
    edges = decile_edges(run.turns)
    started = time.perf_counter()
    try:
        run.edges.append(await written())
        for decile in range(DECILES):
            for n in range(edges[decile], edges[decile + 1]):
                run.latencies_ms.append(await turn(n))
            if decile == DECILES - 1 and settle is not None:
                await settle()
            run.edges.append(await written())
            print(f"bench: {run.side}: {run.completed}/{run.turns} turns", file=sys.stderr)
    except Exception as error:  # reported beside the figures so far, not a traceback
        run.error = f"turn {run.completed}: {type(error).__name__}: {error}"
    run.seconds = time.perf_counter() - started


async def bare_side(shape: LongShape) -> LongRun:
    """The agent in this process, its whole history in memory; it writes nothing to PostgreSQL."""
    run = LongRun("bare", shape.turns)
    agent = long_thread_agent()
    await agent.run(WARM_UP)
    carried: list[Any] = []

    async def turn(n: int) -> float:
        started = time.perf_counter()
        result = await asyncio.wait_for(
            agent.run(prompt(n), message_history=carried), shape.timeout_s
        )
        carried[:] = result.all_messages()
        return 1000 * (time.perf_counter() - started)

    async def nothing() -> sqlstats.Written:
        return sqlstats.NOTHING_WRITTEN

    await measure(run, turn, nothing)
    return run


async def langgraph_side(stack: BenchStack, shape: LongShape) -> LongRun:
    """The LangGraph agent on ``PostgresSaver`` (bench/long_graph.py), on a fresh database."""
    from bench.long_graph import graph_turns  # LangGraph and psycopg only for this side

    run = LongRun("langgraph_postgres", shape.turns)
    database = f"long_langgraph_{uuid.uuid4().hex[:6]}"
    dsn = await stack.fresh_database(database)
    async with connected(stack.observer_dsn(database)) as observer, stack.admin() as admin:
        with graph_turns(dsn, f"{database}-thread") as run_turn:

            async def turn(n: int) -> float:
                started = time.perf_counter()
                await asyncio.wait_for(asyncio.to_thread(run_turn, prompt(n)), shape.timeout_s)
                return 1000 * (time.perf_counter() - started)

            await measure(run, turn, lambda: sqlstats.written(admin, observer, database))
    return run


def _command(
    stack: BenchStack, dsn: str, queue: str, data_dir: Path, budget_tokens: int
) -> WorkerCommand:
    """`ThreadwardenSide`'s worker with the long-thread agent's binding and its budget."""
    usual = ThreadwardenSide().worker_command(dsn, stack.temporal_address, queue, data_dir)
    argv = [*usual.argv, "--bindings", "bench.long_support:bindings"]
    return WorkerCommand(argv, {**usual.env, BUDGET_ENV: str(budget_tokens)}, usual.ready)


async def _settled(
    observer: asyncpg.Connection[Any], group: WorkerGroup, submission: str, timeout_s: float
) -> asyncpg.Record:
    """The submission's outcome and settlement time, once settled."""

    async def probe() -> asyncpg.Record | None:
        group.check()
        return await observer.fetchrow(_SETTLED, submission)

    row = await wait_until(
        probe, lambda r: r is not None, timeout_s=timeout_s, what=f"{submission} settled"
    )
    assert row is not None
    if row["outcome"] != "completed":
        raise RuntimeError(f"submission {submission} settled {row['outcome']}")
    return row


async def threadwarden_side(
    stack: BenchStack, shape: LongShape, temporal: Client, logs: Path
) -> LongRun:
    """The pydantic-ai binding (with its memory budget) under one worker process."""
    run = LongRun("threadwarden", shape.turns)
    tag = f"long-{uuid.uuid4().hex[:6]}"
    database = tag.replace("-", "_")
    dsn = await stack.fresh_database(database)
    await migrate_ledger(dsn)
    queue = f"bench-{tag}"
    thread = f"{tag}-thread"
    command = _command(stack, dsn, queue, logs / tag / "tw", shape.budget_tokens)
    async with (
        worker_group(command, 1, logs / tag) as group,
        ThreadwardenClient.connect(
            Settings(task_queue=queue), Connections(dsn, stack.temporal_address)
        ) as client,
        connected(stack.observer_dsn(database)) as observer,
        stack.admin() as admin,
    ):
        warm = await client.submit(f"{tag}-warm", agent_id=AGENT, input=WARM_UP)
        await _settled(observer, group, warm.submission_id, shape.timeout_s)
        await hosts_idle(temporal, queue)

        async def turn(n: int) -> float:
            at = time.time()
            receipt = await client.submit(thread, agent_id=AGENT, input=prompt(n), host_id=thread)
            row = await _settled(observer, group, receipt.submission_id, shape.timeout_s)
            return 1000 * (float(row["at"]) - at)

        await measure(
            run,
            turn,
            lambda: sqlstats.written(admin, observer, database),
            settle=lambda: hosts_idle(temporal, queue),
        )
        counted = await observer.fetchrow(_RECORDS, thread)
        assert counted is not None
        run.records = {key: int(value) for key, value in counted.items()}
    await history.terminate_open(temporal, await history.list_runs(temporal, queue, set()))
    return run


async def bench_long_thread(
    shape: LongShape, logs: Path, *, stack: BenchStack | None = None
) -> dict[str, LongRun]:
    """Every side once, on one stack (a fresh one unless given)."""
    if stack is None:
        async with bench_stack() as fresh:
            return await bench_long_thread(shape, logs, stack=fresh)
    temporal = await Client.connect(stack.temporal_address)
    measured = {
        "bare": bare_side(shape),
        "langgraph_postgres": langgraph_side(stack, shape),
        "threadwarden": threadwarden_side(stack, shape, temporal, logs),
    }
    return {side: await _guarded(side, shape, measured[side]) for side in SIDES}


async def _guarded(side: str, shape: LongShape, measured: Awaitable[LongRun]) -> LongRun:
    """A side that cannot run at all (its stack, its setup) is reported, not a traceback."""
    try:
        return await measured
    except Exception as error:
        run = LongRun(side, shape.turns)
        run.error = f"{type(error).__name__}: {error}"
        return run
