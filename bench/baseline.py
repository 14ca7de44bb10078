"""The bare-Temporal baseline: one entity workflow per host, one activity per signalled unit.

Each unit is signal-with-started onto its host's entity workflow, which processes the signals in
order and runs one activity per unit: a single-row insert into the same PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    import asyncpg

    from bench.measure import Measurement, wait_until
    from bench.stack import Stack

ENTITY_WORKFLOW = "BenchEntity"
WORK_SIGNAL = "work"
RECORD_ACTIVITY = "bench_record"
POOL_MAX_SIZE = 10
"""The same database pool size a threadwarden worker uses by default."""
_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_units ("
    " host_id text NOT NULL, seq integer NOT NULL, PRIMARY KEY (host_id, seq))"
)


class EntityInput(BaseModel):
    host_id: str
    expected: int
    """Units the entity completes after; a real entity would run on (and continue as new)."""


class Unit(BaseModel):
    host_id: str
    seq: int


@workflow.defn(name=ENTITY_WORKFLOW)
class EntityWorkflow:
    """Queues signalled units and runs one activity per unit, in arrival order."""

    def __init__(self) -> None:
        self._queue: list[Unit] = []
        self._done = 0

    @workflow.signal(name=WORK_SIGNAL)
    def work(self, unit: Unit) -> None:
        self._queue.append(unit)

    @workflow.run
    async def run(self, entity: EntityInput) -> int:
        while self._done < entity.expected:
            await workflow.wait_condition(lambda: self._done < len(self._queue))
            await workflow.execute_activity(
                RECORD_ACTIVITY,
                self._queue[self._done],
                start_to_close_timeout=timedelta(seconds=30),
            )
            self._done += 1
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._done


class RecordActivities:
    """The unit of work: one idempotent single-row insert."""

    def __init__(self, pool: asyncpg.Pool[Any]) -> None:
        self._pool = pool

    @activity.defn(name=RECORD_ACTIVITY)
    async def record(self, unit: Unit) -> None:
        await self._pool.execute(
            "INSERT INTO bench_units (host_id, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            unit.host_id,
            unit.seq,
        )


async def run_baseline(
    stack: Stack, hosts: int, submissions: int, *, timeout_s: float
) -> Measurement:
    """Run the baseline worker on its own task queue; warm up, then measure."""
    run_id = uuid.uuid4().hex[:8]
    task_queue = f"bench-base-{run_id}"
    pool = await asyncpg.create_pool(
        stack.connections.database_url, min_size=1, max_size=POOL_MAX_SIZE
    )
    try:
        await pool.execute(_CREATE_TABLE)
        client = await Client.connect(
            stack.connections.temporal_address, data_converter=pydantic_data_converter
        )
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[EntityWorkflow],
            activities=[RecordActivities(pool).record],
        )
        async with worker:
            await _measure(client, pool, task_queue, f"warm-{run_id}", 1, 1, timeout_s)
            return await _measure(
                client, pool, task_queue, f"base-{run_id}", hosts, submissions, timeout_s
            )
    finally:
        await pool.close()


async def _measure(
    client: Client,
    pool: asyncpg.Pool[Any],
    task_queue: str,
    prefix: str,
    hosts: int,
    submissions: int,
    timeout_s: float,
) -> Measurement:
    host_ids = [f"{prefix}-h{n}" for n in range(hosts)]
    total = hosts * submissions
    started = time.perf_counter()
    handles = await asyncio.gather(
        *(_signal(client, task_queue, host, submissions) for host in host_ids)
    )

    async def count() -> int:
        found = await pool.fetchval(
            "SELECT count(*) FROM bench_units WHERE host_id = ANY($1::text[])", host_ids
        )
        return int(found)

    await wait_until(
        count,
        lambda n: n >= total,
        timeout_s=timeout_s,
        what=f"{hosts}×{submissions} baseline activities completed",
    )
    elapsed = time.perf_counter() - started
    async with asyncio.timeout(timeout_s):
        done = await asyncio.gather(*(handle.result() for handle in handles))
    if sum(done) != total:
        raise RuntimeError(f"baseline: expected {total} units processed, got {done}")
    return Measurement("baseline", total, elapsed)


async def _signal(
    client: Client, task_queue: str, host_id: str, submissions: int
) -> WorkflowHandle[EntityWorkflow, int]:
    """Signal-with-start the host's entity once per unit, in order; return its handle."""
    handle: WorkflowHandle[EntityWorkflow, int] | None = None
    for seq in range(submissions):
        handle = await client.start_workflow(
            EntityWorkflow.run,
            EntityInput(host_id=host_id, expected=submissions),
            id=f"bench-entity/{host_id}",
            task_queue=task_queue,
            start_signal=WORK_SIGNAL,
            start_signal_args=[Unit(host_id=host_id, seq=seq)],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
    assert handle is not None
    return handle
