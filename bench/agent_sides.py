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
settled), each turn's latency (bare: ``agent.run``; threadwarden: from its start, the later of
its submit and its thread's previous turn's settlement, to its ``settled_at``), CPU of the
agent's processes (the bare process over its measured loop; the workers from the first submit
until the hosts went idle), and the chat server's requests for the measured turns. For
threadwarden also SQL statements (pg_stat_statements from the reset after the warm-up until
idle; the bench's own polls left out) and Temporal history events of the measured threads'
host workflows.

``--stream`` (issue 31): the chat server streams each answer a word per chunk, `STREAM_DELAY_S`
apart (without it: no pause, so the model costs both sides the same as before). The bare agent
streams its requests too (an ``event_stream_handler``) and reports, per turn, the time to its
answer's first text chunk. Under threadwarden, with ``readers`` per thread, a ``threadwarden
console`` process (`bench.streams`, role `bench.stack.CONSOLE`: its statements and CPU apart)
serves ``GET /v1/threads/{id}/events`` to a reader process (`bench.sse`) opened on the measured
threads before they exist; each turn's time to first delta runs from its start, the later of
its submit and its thread's previous turn's settlement (turns of a thread are admitted at once
and run one after another, as the bare agent's do), to the first ``event: delta`` of it at a
reader (wall clocks of one machine).
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
from bench.agent_support import AGENT, STREAM_DELAY_S, WARM_UP, measured_requests, unit_prompt
from bench.measure import wait_until
from bench.procs import ROOT, WorkerCommand, WorkerGroup, worker_group
from bench.side import Shape, drive
from bench.stack import CONSOLE, BenchStack, bench_stack, connected, with_user
from bench.streams import StreamWatch, console_command, console_streams
from bench.threadwarden_run import ThreadwardenSide, migrate_ledger, threadwarden_argv
from tests.helpers.chat_server import ChatServer, chat_server
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections
from threadwarden.config.settings import Settings
from threadwarden.workflows.contracts import host_workflow_id, sweeper_workflow_id

IDLE_DEADLINE_S = 60.0
BARE_STARTUP_S = 60.0
"""Allowed on top of ``--timeout`` for the bare process's imports and warm-up turn."""
SETTLED = (
    "SELECT count(*) FROM threadwarden.submissions"
    " WHERE thread_id = ANY($1::text[]) AND state = 'settled'"
)
COMPLETED = SETTLED + " AND outcome = 'completed'"
SETTLED_AT = (
    "SELECT submission_id, extract(epoch FROM settled_at)::float8 AS at"
    "  FROM threadwarden.submissions WHERE thread_id = ANY($1::text[]) AND state = 'settled'"
)


async def bench_agents(
    shape: Shape, repeat: int, logs: Path, *, stream: bool = False, readers: int = 0
) -> dict[str, list[AgentRun]]:
    """Every repetition of both sides; even repetitions start with the bare agent. With
    ``stream`` the model streams its answers slowly, with ``readers`` per thread under
    threadwarden (see the module docstring)."""
    runs: dict[str, list[AgentRun]] = {side: [] for side in SIDES}
    async with bench_stack() as stack, chat_server() as server:
        _pace(server, STREAM_DELAY_S if stream else 0.0)
        temporal = await Client.connect(stack.temporal_address)
        for rep in range(repeat):
            for side in ("bare", "threadwarden") if rep % 2 == 0 else ("threadwarden", "bare"):
                measured = (
                    bare_side(server, shape, stream=stream)
                    if side == "bare"
                    else threadwarden_side(
                        stack, server, shape, rep, temporal, logs, readers=readers if stream else 0
                    )
                )
                runs[side].append(await _guarded(side, shape, measured))
    return runs


def _pace(server: ChatServer, delay_s: float) -> None:
    """The chat server's pause between the chunks of a streamed answer. A request the adapter
    streams without ``--stream`` gets its chunks at once: the model costs what it did."""
    if not hasattr(server, "stream_delay_s"):
        print("bench: the chat server cannot stream (no stream_delay_s)", file=sys.stderr)
    server.stream_delay_s = delay_s


async def _guarded(side: str, shape: Shape, measured: Awaitable[AgentRun]) -> AgentRun:
    """A side that cannot run at all is reported (its error), not a traceback."""
    try:
        return await measured
    except Exception as error:
        run = AgentRun(side, shape.hosts * shape.submissions)
        run.error = f"{type(error).__name__}: {error}"
        print(f"bench: {side}: {run.error}", file=sys.stderr)
        return run


async def bare_side(server: ChatServer, shape: Shape, *, stream: bool = False) -> AgentRun:
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
        *(["--stream"] if stream else []),
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
    run.turn_ms = figures["turn_ms"]
    run.first_delta_ms = figures.get("first_chunk_ms")
    run.model_requests = measured_requests(server.requests[asked:])
    return run


def _command(stack: BenchStack, dsn: str, queue: str, data_dir: Path, url: str) -> WorkerCommand:
    """`ThreadwardenSide`'s worker, with the measured agent's binding and the server's URL."""
    usual = ThreadwardenSide().worker_command(dsn, stack.temporal_address, queue, data_dir)
    argv = [*usual.argv, "--bindings", "bench.agent_support:bindings"]
    return WorkerCommand(argv, {**usual.env, "BENCH_MODEL_URL": url}, usual.ready)


async def threadwarden_side(
    stack: BenchStack,
    server: ChatServer,
    shape: Shape,
    rep: int,
    temporal: Client,
    logs: Path,
    *,
    readers: int = 0,
) -> AgentRun:
    """One repetition under threadwarden (see the module docstring); ``readers`` event-stream
    readers per thread on a console process of its own."""
    tag = f"agents-r{rep}-{uuid.uuid4().hex[:6]}"
    database = tag.replace("-", "_")
    dsn = await stack.fresh_database(database)
    await migrate_ledger(dsn)
    queue = f"bench-{tag}"
    command = _command(stack, dsn, queue, logs / tag / "tw", server.url)
    threads = [f"{tag}-t{n}" for n in range(shape.hosts)]
    run = AgentRun("threadwarden", len(threads) * shape.submissions)
    async with (
        worker_group(command, shape.workers, logs / tag) as group,
        ThreadwardenClient.connect(
            Settings(task_queue=queue), Connections(dsn, stack.temporal_address)
        ) as client,
        connected(stack.observer_dsn(database)) as observer,
        stack.admin() as admin,
    ):
        await client.submit(f"{tag}-warm", agent_id=AGENT, input=WARM_UP)
        await wait_until(
            lambda: observer.fetchval(SETTLED, [f"{tag}-warm"]),
            lambda n: n == 1,
            timeout_s=shape.timeout_s,
            what="the warm-up turn settled",
        )
        await hosts_idle(temporal, queue)
        async with _readers(stack, dsn, threads, readers, logs / tag) as watch:
            await sqlstats.reset(admin)
            processes = {"workers": group.pids, **stack.server_pids()}
            if watch is not None:
                processes.update({"console": watch.console.pids, "readers": [watch.client.pid]})
            before, asked = cpu.snapshot(processes), len(server.requests)
            submitted = await _drive(client, observer, group, threads, shape, run)
            if run.error is None:
                await hosts_idle(temporal, queue)
            spent = cpu.used(before, cpu.snapshot(processes))
            run.cpu_s = spent.pop("workers")
            run.servers_cpu_s = spent
            run.model_requests = measured_requests(server.requests[asked:])
            run.completed = int(await observer.fetchval(COMPLETED, threads))
            settled = {
                r["submission_id"]: r["at"] for r in await observer.fetch(SETTLED_AT, threads)
            }
            run.turn_ms = turn_latencies(submitted, settled)
            if watch is not None:
                received = await watch.finish(observer, threads)
                run.error = run.error or "; ".join(received["errors"]) or None
                run.deltas_received = received["deltas_received"]
                run.restarted_steps = received.get("restarted_steps")
                run.first_delta_ms, run.turns_without_delta = first_deltas(
                    submitted, settled, watch.first_deltas
                )
        counted = await sqlstats.statements(admin, database, top=shape.top)
    run.statements, run.top_statements = counted.statements, counted.top
    if readers:
        run.console_statements = counted.console_calls
    hosts = {host_workflow_id(thread) for thread in threads}
    runs = await history.list_runs(temporal, queue, hosts if run.error is None else set())
    counts = await history.count(
        temporal, runs, measured=hosts.__contains__, sweeper=sweeper_workflow_id(queue)
    )
    await history.terminate_open(temporal, runs)
    run.history_events = counts.events
    return run


@contextlib.asynccontextmanager
async def _readers(
    stack: BenchStack, dsn: str, threads: list[str], readers: int, logs: Path
) -> AsyncIterator[StreamWatch | None]:
    """With ``readers``: a console process and that many event streams per thread (opened
    before the threads exist; they wait for them); both stop on exit. Else None."""
    if not readers:
        yield None
        return
    command, token = console_command(
        threadwarden_argv(), with_user(dsn, CONSOLE), stack.temporal_address, logs / "console-data"
    )
    async with console_streams(command, token, threads, readers * len(threads), logs) as watch:
        if watch.opened < watch.requested:
            raise RuntimeError(f"{watch.opened}/{watch.requested} event streams opened")
        yield watch


Turn = tuple[str, int, float]
"""A submitted turn: its thread, its turn number in the thread, its submit time (wall clock)."""


def turn_starts(submitted: dict[str, Turn], settled_at: dict[str, float]) -> dict[str, float]:
    """When each turn started: the later of its submit and its thread's previous turn's
    settlement (all wall clocks, seconds)."""
    by_turn = {(thread, turn): sid for sid, (thread, turn, _) in submitted.items()}
    starts: dict[str, float] = {}
    for sid, (thread, turn, at) in submitted.items():
        previous = by_turn.get((thread, turn - 1))
        before = settled_at.get(previous, 0.0) if previous is not None else 0.0
        starts[sid] = max(at, before)
    return starts


def turn_latencies(submitted: dict[str, Turn], settled_at: dict[str, float]) -> list[float]:
    """Per settled turn, ms from its start (`turn_starts`) to its settlement."""
    starts = turn_starts(submitted, settled_at)
    return [1000 * (at - starts[sid]) for sid, at in settled_at.items() if sid in starts]


def first_deltas(
    submitted: dict[str, Turn],
    settled_at: dict[str, float],
    first: list[tuple[str, float]],
) -> tuple[list[float], int]:
    """Per (reader, turn), ms from the turn's start (`turn_starts`) to its first delta at that
    reader; and the turns no reader got a delta of."""
    starts = turn_starts(submitted, settled_at)
    samples = [1000 * (at - starts[sid]) for sid, at in first if sid in starts]
    reached = {sid for sid, _ in first}
    return samples, sum(sid not in reached for sid in submitted)


async def _drive(
    client: ThreadwardenClient,
    observer: asyncpg.Connection[Any],
    group: WorkerGroup,
    threads: list[str],
    shape: Shape,
    run: AgentRun,
) -> dict[str, Turn]:
    """Admit every turn (each thread's in order), then poll until all settled or time is up
    (`bench.side.drive`); the turns submitted, by submission id."""
    submitted: dict[str, Turn] = {}

    async def submit(t: int, thread: str, turn: int) -> None:
        at = time.time()
        receipt = await client.submit(
            thread, agent_id=AGENT, input=unit_prompt(t, turn), host_id=thread
        )
        submitted[receipt.submission_id] = (thread, turn, at)

    async def submit_all() -> None:
        for turn in range(shape.submissions):
            await asyncio.gather(*(submit(t, thread, turn) for t, thread in enumerate(threads)))

    async def settled() -> int:
        return int(await observer.fetchval(SETTLED, threads))

    await drive(submit_all, settled, group, run, timeout_s=shape.timeout_s, unit="turns")
    return submitted


async def hosts_idle(temporal: Client, queue: str) -> None:
    """Wait until no host workflow of ``queue`` runs (the sweeper's may)."""

    async def open_hosts() -> int:
        query = f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
        return sum(["host" in r.id async for r in temporal.list_workflows(query)])

    await wait_until(open_hosts, lambda n: n == 0, timeout_s=IDLE_DEADLINE_S, what="hosts idle")
