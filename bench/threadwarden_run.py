"""The threadwarden side: H hosts (one thread each) × N ``scripted`` submissions, until settled."""

from __future__ import annotations

import asyncio
import time
import uuid

from bench.measure import Measurement, wait_until
from bench.stack import Stack
from ledger.models import ThreadStatus
from worker.client import ThreadwardenClient
from worker.runtime import running_worker
from worker.settings import Settings

AGENT = "scripted"
INPUT = [{"say": "hi"}]


async def run_threadwarden(
    stack: Stack, hosts: int, submissions: int, *, timeout_s: float
) -> Measurement:
    """Run a worker and a client on a fresh task queue; warm up, then measure."""
    run_id = uuid.uuid4().hex[:8]
    settings = Settings(task_queue=f"bench-tw-{run_id}", data_dir=stack.scratch / "tw")
    async with (
        running_worker(settings, stack.connections),
        ThreadwardenClient.connect(settings, stack.connections) as client,
    ):
        await _measure(client, f"warm-{run_id}", 1, 1, timeout_s=timeout_s)
        return await _measure(client, f"tw-{run_id}", hosts, submissions, timeout_s=timeout_s)


async def _measure(
    client: ThreadwardenClient, prefix: str, hosts: int, submissions: int, *, timeout_s: float
) -> Measurement:
    threads = [f"{prefix}-h{n}" for n in range(hosts)]
    started = time.perf_counter()
    await asyncio.gather(*(_submit(client, thread, submissions) for thread in threads))
    statuses = await wait_until(
        lambda: _statuses(client, threads),
        lambda found: all(_settled(s) == submissions for s in found),
        timeout_s=timeout_s,
        what=f"{hosts}×{submissions} threadwarden submissions settled",
    )
    elapsed = time.perf_counter() - started
    outcomes = [s.outcome for status in statuses for s in status.submissions]
    if outcomes.count("completed") != hosts * submissions:
        raise RuntimeError(f"threadwarden: expected every submission completed, got {outcomes}")
    return Measurement("threadwarden", hosts * submissions, elapsed)


async def _submit(client: ThreadwardenClient, thread: str, submissions: int) -> None:
    """One thread's submissions in order (the thread id is also its host id)."""
    for _ in range(submissions):
        await client.submit(thread, agent_id=AGENT, input=INPUT, host_id=thread)


async def _statuses(client: ThreadwardenClient, threads: list[str]) -> list[ThreadStatus]:
    return list(await asyncio.gather(*(client.thread_status(t) for t in threads)))


def _settled(status: ThreadStatus) -> int:
    return sum(s.state == "settled" for s in status.submissions)
