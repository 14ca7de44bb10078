"""The agent shape's two sides (``python -m bench --shape agent``, issue 20 item 6).

A unit is one agent turn, 2 model requests to the scripted chat server on 127.0.0.1 and 1
tool, of the same pydantic-ai agent (bench/agent_support.py), run two ways on one stack and one
chat server, repeated, alternating which side goes first:

- *bare*: ``agent.run`` in a process of its own (bench/agent_bare.py): H conversations
  concurrent, each N turns in order with its message history carried; after one warm-up turn.
- *threadwarden*: W ``threadwarden worker --bindings bench.agent_support:bindings`` processes
  on a fresh database and task queue; after one warm-up turn (its host idle), H threads × N
  turns admitted at once by the client, run in FIFO order per thread.

Measured per side: turns per second (first submit to the poll that sees the last turn
settled), CPU of the agent's processes (the bare process over its measured loop; the workers
from the first submit until the hosts went idle), and the chat server's requests for the
measured turns. For threadwarden also SQL statements (pg_stat_statements from the reset after
the warm-up until idle; the bench's own polls left out) and Temporal history events of the
measured threads' host workflows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from bench import cpu, history, sqlstats
from bench.agent_report import SIDES, AgentRun
from bench.agent_support import AGENT, WARM_UP, measured_requests, unit_prompt
from bench.measure import wait_until
from bench.procs import ROOT, WorkerCommand, WorkerDied, WorkerGroup, worker_group
from bench.side import Shape
from bench.stack import BenchStack, bench_stack
from bench.threadwarden_run import ThreadwardenSide
from tests.helpers.chat_server import ChatServer, chat_server
from threadwarden.ledger.migrations import migrate
from threadwarden.worker.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections
from threadwarden.worker.settings import Settings
from threadwarden.workflows.contracts import host_workflow_id, sweeper_workflow_id

IDLE_DEADLINE_S = 60.0
BARE_STARTUP_S = 60.0
"""Allowed on top of ``--timeout`` for the bare process's imports and warm-up turn."""
SETTLED = (
    "SELECT count(*) FROM threadwarden.submissions"
    " WHERE thread_id = ANY($1::text[]) AND state = 'settled'"
)
COMPLETED = SETTLED + " AND outcome = 'completed'"


async def bench_agents(shape: Shape, repeat: int, logs: Path) -> dict[str, list[AgentRun]]:
    """Every repetition of both sides; even repetitions start with the bare agent."""
    runs: dict[str, list[AgentRun]] = {side: [] for side in SIDES}
    async with bench_stack() as stack, chat_server() as server:
        temporal = await Client.connect(stack.temporal_address)
        for rep in range(repeat):
            for side in ("bare", "threadwarden") if rep % 2 == 0 else ("threadwarden", "bare"):
                measured = (
                    bare_side(server, shape)
                    if side == "bare"
                    else threadwarden_side(stack, server, shape, rep, temporal, logs)
                )
                runs[side].append(await _guarded(side, shape, measured))
    return runs


async def _guarded(side: str, shape: Shape, measured: Awaitable[AgentRun]) -> AgentRun:
    """A side that cannot run at all is reported (its error), not a traceback."""
    try:
        return await measured
    except Exception as error:
        run = AgentRun(side, shape.hosts * shape.submissions)
        run.error = f"{type(error).__name__}: {error}"
        print(f"bench: {side}: {run.error}", file=sys.stderr)
        return run


async def bare_side(server: ChatServer, shape: Shape) -> AgentRun:
    """One repetition of the bare agent, in a process of its own."""
    run = AgentRun("bare", shape.hosts * shape.submissions)
    asked = len(server.requests)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.agent_bare",
        server.url,
        str(shape.hosts),
        str(shape.submissions),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), shape.timeout_s + BARE_STARTUP_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        run.error = f"timeout: the bare agent ran past {shape.timeout_s:g}s"
        return run
    if process.returncode != 0:
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
        run.error = f"the bare agent exited with code {process.returncode}: {tail}"
        return run
    figures = json.loads(out.decode().strip().splitlines()[-1])
    run.seconds, run.cpu_s, run.completed = figures["seconds"], figures["cpu_s"], figures["turns"]
    run.model_requests = measured_requests(server.requests[asked:])
    return run


def _command(stack: BenchStack, dsn: str, queue: str, data_dir: Path, url: str) -> WorkerCommand:
    """`ThreadwardenSide`'s worker, with the measured agent's binding and the server's URL."""
    usual = ThreadwardenSide().worker_command(dsn, stack.temporal_address, queue, data_dir)
    argv = [*usual.argv, "--bindings", "bench.agent_support:bindings"]
    return WorkerCommand(argv, {**usual.env, "BENCH_MODEL_URL": url}, usual.ready)


async def threadwarden_side(
    stack: BenchStack, server: ChatServer, shape: Shape, rep: int, temporal: Client, logs: Path
) -> AgentRun:
    """One repetition under threadwarden (see the module docstring)."""
    tag = f"agents-r{rep}-{uuid.uuid4().hex[:6]}"
    database = tag.replace("-", "_")
    dsn = await stack.fresh_database(database)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    queue = f"bench-{tag}"
    command = _command(stack, dsn, queue, logs / tag / "tw", server.url)
    threads = [f"{tag}-t{n}" for n in range(shape.hosts)]
    run = AgentRun("threadwarden", len(threads) * shape.submissions)
    async with (
        worker_group(command, shape.workers, logs / tag) as group,
        ThreadwardenClient.connect(
            Settings(task_queue=queue), Connections(dsn, stack.temporal_address)
        ) as client,
        _closing(asyncpg.connect(stack.observer_dsn(database))) as observer,
        _closing(stack.admin()) as admin,
    ):
        await client.submit(f"{tag}-warm", agent_id=AGENT, input=WARM_UP)
        await wait_until(
            lambda: observer.fetchval(SETTLED, [f"{tag}-warm"]),
            lambda n: n == 1,
            timeout_s=shape.timeout_s,
            what="the warm-up turn settled",
        )
        await _idle(temporal, queue)
        await sqlstats.reset(admin)
        processes = {"workers": group.pids, **stack.server_pids()}
        before, asked = cpu.snapshot(processes), len(server.requests)
        await _drive(client, observer, group, threads, shape, run)
        if run.error is None:
            await _idle(temporal, queue)
        spent = cpu.used(before, cpu.snapshot(processes))
        run.cpu_s = spent.pop("workers")
        run.servers_cpu_s = spent
        run.model_requests = measured_requests(server.requests[asked:])
        run.completed = int(await observer.fetchval(COMPLETED, threads))
        counted = await sqlstats.statements(admin, database, top=shape.top)
    run.statements, run.top_statements = counted.statements, counted.top
    hosts = {host_workflow_id(thread) for thread in threads}
    runs = await history.list_runs(temporal, queue, hosts if run.error is None else set())
    counts = await history.count(
        temporal, runs, measured=hosts.__contains__, sweeper=sweeper_workflow_id(queue)
    )
    await history.terminate_open(temporal, runs)
    run.history_events = counts.events
    return run


async def _drive(
    client: ThreadwardenClient,
    observer: asyncpg.Connection[Any],
    group: WorkerGroup,
    threads: list[str],
    shape: Shape,
    run: AgentRun,
) -> None:
    """Admit every turn (each thread's in order), then poll until all settled or time is up."""
    units = run.units
    last = [-1]  # settled turns at the last poll; -1 while still submitting

    async def settled() -> int:
        group.check()
        last[0] = int(await observer.fetchval(SETTLED, threads))
        return last[0]

    started = time.perf_counter()
    try:
        async with asyncio.timeout(shape.timeout_s):
            for turn in range(shape.submissions):
                await asyncio.gather(
                    *(
                        client.submit(
                            thread, agent_id=AGENT, input=unit_prompt(t, turn), host_id=thread
                        )
                        for t, thread in enumerate(threads)
                    )
                )
            await wait_until(
                settled, lambda n: n >= units, timeout_s=shape.timeout_s, what="all settled"
            )
    except TimeoutError:
        done = f"{last[0]}/{units} turns settled" if last[0] >= 0 else "still submitting"
        run.error = f"timeout: {done} after {shape.timeout_s:g}s"
    except WorkerDied as error:
        run.error = f"WorkerDied: {error}"
    run.seconds = time.perf_counter() - started


async def _idle(temporal: Client, queue: str) -> None:
    """Wait until no host workflow of ``queue`` runs (the sweeper's may)."""

    async def open_hosts() -> int:
        query = f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
        return sum(["host" in r.id async for r in temporal.list_workflows(query)])

    await wait_until(open_hosts, lambda n: n == 0, timeout_s=IDLE_DEADLINE_S, what="hosts idle")


@contextlib.asynccontextmanager
async def _closing(
    opened: Awaitable[asyncpg.Connection[Any]],
) -> AsyncIterator[asyncpg.Connection[Any]]:
    """The connection ``opened`` gives, closed on exit."""
    conn = await opened
    try:
        yield conn
    finally:
        await conn.close()
