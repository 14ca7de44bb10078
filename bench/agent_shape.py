"""``python -m bench.agent_shape``: the agent shape (issue 20 item 6).

A unit is one agent turn, 2 model requests to the scripted chat server on 127.0.0.1 and 1
tool, the same pydantic-ai agent (bench/agent_support.py) run two ways in the same run:

- *bare*: ``agent.run`` in a process of its own (bench/agent_bare.py), threads concurrent, each
  thread's turns in order with its history carried;
- *threadwarden*: ``threadwarden worker --bindings bench.agent_support:bindings`` (one process),
  every turn admitted by the client at once, run in FIFO order per thread.

Reported: turns per second of each and their ratio, the worker's CPU per turn against the bare
process's, SQL statements per turn (pg_stat_statements; the bench's own polling is left out) and
Temporal history events per turn (every host run of the task queue, once the hosts went idle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from bench import history, sqlstats
from bench.agent_support import AGENT, unit_prompt
from bench.measure import wait_until
from bench.stack import BenchStack, bench_stack
from tests.helpers.chat_server import chat_server
from threadwarden.ledger.migrations import migrate
from threadwarden.worker.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections
from threadwarden.worker.settings import Settings
from threadwarden.workflows.contracts import sweeper_workflow_id

READY = "worker on task queue"
TICKS = os.sysconf("SC_CLK_TCK")
SETTLED = "SELECT count(*) FROM threadwarden.submissions WHERE state = 'settled'"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def _bare(url: str, threads: int, turns: int) -> dict[str, float]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.agent_bare",
        url,
        str(threads),
        str(turns),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, "the bare agent failed"
    result: dict[str, float] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def _worker(stack: BenchStack, dsn: str, queue: str, url: str, logs: Path) -> Any:
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("THREADWARDEN_")},
        "THREADWARDEN_DATABASE_URL": dsn,
        "THREADWARDEN_TEMPORAL_ADDRESS": stack.temporal_address,
        "THREADWARDEN_TASK_QUEUE": queue,
        "THREADWARDEN_DATA_DIR": str(logs / "tw"),
        "BENCH_MODEL_URL": url,
    }
    argv = [sys.executable, "-m", "threadwarden.worker.cli", "worker"]
    with (logs / "stdout").open("wb") as out, (logs / "stderr").open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *argv, "--bindings", "bench.agent_support:bindings", env=env, stdout=out, stderr=err
        )

    async def ready() -> bool:
        assert process.returncode is None, (logs / "stderr").read_text()[-2000:]
        return READY in (logs / "stdout").read_text()

    await wait_until(ready, bool, timeout_s=60, what="worker ready")
    return process


async def _settled(observer: asyncpg.Connection[Any], units: int) -> None:
    async def count() -> int:
        return int(await observer.fetchval(SETTLED))

    await wait_until(count, lambda n: n >= units, timeout_s=300, what=f"{units} settled")


async def _idle(temporal: Client, queue: str) -> list[Any]:
    async def open_runs() -> list[Any]:
        query = f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'"
        return [r async for r in temporal.list_workflows(query)]

    await wait_until(
        open_runs,
        lambda runs: all("host" not in r.id for r in runs),
        timeout_s=60,
        what="hosts idle",
    )
    return [r async for r in temporal.list_workflows(f"TaskQueue = '{queue}'")]


async def _threadwarden(stack: BenchStack, url: str, threads: int, turns: int) -> dict[str, float]:
    name = f"agents_{uuid.uuid4().hex[:8]}"
    dsn = await stack.fresh_database(name)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    queue = f"bench-agents-{uuid.uuid4().hex[:8]}"
    process = await _worker(stack, dsn, queue, url, stack.scratch / name)
    observer = await asyncpg.connect(stack.observer_dsn(name))
    admin = await stack.admin()
    settings = Settings(task_queue=queue)
    try:
        async with ThreadwardenClient.connect(
            settings, Connections(dsn, stack.temporal_address)
        ) as client:
            await client.submit(f"{name}-warm", agent_id=AGENT, input=unit_prompt(-1, 0))
            await _settled(observer, 1)
            temporal = await Client.connect(stack.temporal_address)
            await _idle(temporal, queue)
            await sqlstats.reset(admin)
            cpu = _cpu_s(process.pid)
            start = time.perf_counter()
            for turn in range(turns):
                await asyncio.gather(
                    *(
                        client.submit(f"{name}-{t}", agent_id=AGENT, input=unit_prompt(t, turn))
                        for t in range(threads)
                    )
                )
            await _settled(observer, 1 + threads * turns)
            seconds = time.perf_counter() - start
            after = _cpu_s(process.pid)
        statements = await sqlstats.statements(admin, name, top=0)
        runs = await _idle(temporal, queue)
        counts = await history.count(
            temporal,
            runs,
            measured=lambda i: f"{name}-" in i and "warm" not in i,
            sweeper=sweeper_workflow_id(queue),
        )
    finally:
        process.terminate()
        await process.wait()
        await observer.close()
        await admin.close()
    units = threads * turns
    return {
        "seconds": seconds,
        "cpu_s": after - cpu,
        "turns": units,
        "sql_statements_per_turn": statements.statements / units,
        "history_events_per_turn": counts.events / units,
    }


async def run(threads: int, turns: int) -> dict[str, Any]:
    async with bench_stack() as stack, chat_server() as server:
        bare = await _bare(server.url, threads, turns)
        asked_bare = len(server.requests)
        tw = await _threadwarden(stack, server.url, threads, turns)
        asked_tw = len(server.requests) - asked_bare
    sides = {"bare": bare, "threadwarden": tw}
    for side in sides.values():
        side["turns_per_s"] = side["turns"] / side["seconds"]
        side["cpu_ms_per_turn"] = 1000 * side["cpu_s"] / side["turns"]
    return {
        "threads": threads,
        "turns_per_thread": turns,
        "ratio": tw["turns_per_s"] / bare["turns_per_s"],
        "model_requests": {"bare": asked_bare, "threadwarden": asked_tw},
        **sides,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_shape", description=__doc__)
    parser.add_argument("--threads", type=int, default=4, help="conversations (default 4)")
    parser.add_argument("--turns", type=int, default=10, help="turns per conversation (10)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.threads, args.turns))
    if args.json:
        print(json.dumps(report))
        return 0
    for side in ("bare", "threadwarden"):
        figures = report[side]
        print(
            f"{side:>12}: {figures['turns_per_s']:.1f} turns/s, {figures['cpu_ms_per_turn']:.1f}"
            f" ms CPU/turn"
        )
    tw = report["threadwarden"]
    print(
        f"ratio {report['ratio']:.2f}x the bare agent; {tw['sql_statements_per_turn']:.1f} SQL"
        f" statements and {tw['history_events_per_turn']:.1f} history events per turn;"
        f" model requests {report['model_requests']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
