"""The bare-Temporal baseline: one entity workflow per host, one activity per signalled unit.

Each unit is signal-with-started onto its host's entity workflow, which processes the signals in
order and runs one activity per unit: a single-row insert into ``bench_units`` in the side's
database (its ``done_at`` defaults to the server's clock). The worker runs in its own process
(`bench.baseline_worker`), like threadwarden's.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter

with workflow.unsafe.imports_passed_through():
    import asyncpg

    from bench.procs import WorkerCommand
    from bench.side import Driver
    from bench.stack import connected

ENTITY_WORKFLOW = "BenchEntity"
WORK_SIGNAL = "work"
RECORD_ACTIVITY = "bench_record"
READY = re.compile(r"baseline worker on task queue")
CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_units ("
    " host_id text NOT NULL, seq integer NOT NULL,"
    " done_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (host_id, seq))"
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


class _BaselineDriver:
    def __init__(self, client: Client, task_queue: str, expected: int) -> None:
        self._client = client
        self._task_queue = task_queue
        self._expected = expected

    async def submit(self, host: str, seq: int) -> str:
        """Signal-with-start the host's entity with unit ``seq``."""
        await self._client.start_workflow(
            EntityWorkflow.run,
            EntityInput(host_id=host, expected=self._expected),
            id=entity_workflow_id(host),
            task_queue=self._task_queue,
            start_signal=WORK_SIGNAL,
            start_signal_args=[Unit(host_id=host, seq=seq)],
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return f"{host}/{seq}"


def entity_workflow_id(host: str) -> str:
    return f"bench-entity/{host}"


class BaselineSide:
    name = "baseline"
    count_sql = "SELECT count(*) FROM bench_units WHERE host_id = ANY($1::text[])"
    completions_sql = (
        "SELECT host_id || '/' || seq AS key, done_at, true AS ok"
        " FROM bench_units WHERE host_id = ANY($1::text[])"
    )

    async def prepare(self, dsn: str) -> None:
        async with connected(dsn) as conn:
            await conn.execute(CREATE_TABLE)

    def worker_command(
        self, dsn: str, temporal_address: str, task_queue: str, data_dir: Path
    ) -> WorkerCommand:
        argv = [sys.executable, "-m", "bench.baseline_worker", dsn, temporal_address, task_queue]
        return WorkerCommand(argv, {}, READY)

    @contextlib.asynccontextmanager
    async def driver(
        self, dsn: str, temporal_address: str, task_queue: str, submissions: int
    ) -> AsyncIterator[Driver]:
        client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
        yield _BaselineDriver(client, task_queue, submissions)

    def alongside(
        self, dsn: str, temporal_address: str, hosts: Sequence[str], logs: Path
    ) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # no console beside the baseline

    def workflow_id(self, host: str) -> str:
        return entity_workflow_id(host)

    def sweeper_id(self, task_queue: str) -> str:
        return ""  # no sweeper
