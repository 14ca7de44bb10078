"""What one unit of the bench workload costs: SQL statements and history events.

The workload is the bench's (`bench/`): hosts of one thread each, every submission a ``scripted``
``say``, submitted in order per host and concurrently across hosts. Everything the worker, its
sweeper and the client send to Postgres is counted, every transaction included (transaction
control itself is not a statement); every event of every host workflow run is counted.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

import pytest
from asyncpg.connection import LoggedQuery
from temporalio.client import Client, WorkflowExecutionStatus

from tests.helpers.polling import eventually
from threadwarden.client import client as client_module
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.config.settings import Settings
from threadwarden.ledger import pool as ledger_pool
from threadwarden.worker import runtime
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows.contracts import host_workflow_id

HOSTS, SUBMISSIONS = 4, 10
UNITS = HOSTS * SUBMISSIONS
MAX_STATEMENTS_PER_UNIT = 8
MAX_EVENTS_PER_UNIT = 10
CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement run on the pools the worker and the client create."""
    seen: list[str] = []

    def log(query: LoggedQuery) -> None:
        seen.append(query.query)

    counted = functools.partial(ledger_pool.create_pool, on_query=log)
    monkeypatch.setattr(runtime, "create_pool", counted)
    monkeypatch.setattr(client_module, "create_pool", counted)
    return seen


@pytest.fixture
async def production_like(
    settings: Settings, connections: Connections, statements: list[str]
) -> AsyncIterator[ThreadwardenClient]:
    """A worker and a client with the default sweeper pace (the tests' quick one would sweep
    every 200 ms) on counted pools."""
    defaults = Settings()
    paced = settings.model_copy(
        update={
            "sweep_interval_ms": defaults.sweep_interval_ms,
            "sweep_idle_interval_ms": defaults.sweep_idle_interval_ms,
            "sweep_grace_ms": defaults.sweep_grace_ms,
        }
    )
    async with (
        running_worker(paced, connections),
        ThreadwardenClient.connect(paced, connections) as client,
    ):
        yield client


async def _submit_all(client: ThreadwardenClient, hosts: list[str]) -> None:
    async def one_host(host: str) -> None:
        for n in range(SUBMISSIONS):
            await client.submit(host, agent_id="scripted", input=[{"say": f"hi {n}"}])

    await asyncio.gather(*(one_host(h) for h in hosts))


async def _host_events(temporal: Client, hosts: list[str]) -> int:
    total = 0
    for host in hosts:
        query = f"WorkflowId = '{host_workflow_id(host)}'"
        async for run in temporal.list_workflows(query):
            history = await temporal.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
            total += len(history.events)
    return total


async def _all_idle(temporal: Client, hosts: list[str]) -> bool:
    for host in hosts:
        described = await temporal.get_workflow_handle(host_workflow_id(host)).describe()
        if described.status != WorkflowExecutionStatus.COMPLETED:
            return False
    return True


async def test_unit_of_the_bench_workload_costs_at_most_8_statements_and_10_events(
    production_like: ThreadwardenClient,
    statements: list[str],
    connections: Connections,
    ids: str,
) -> None:
    client = production_like
    hosts = [f"{ids}-h{n}" for n in range(HOSTS)]
    temporal = await connect_temporal(connections.temporal_address, "default")
    statements.clear()

    await _submit_all(client, hosts)
    # Polled on Temporal, not on the counted pools: every host settled all and went idle.
    await eventually(
        lambda: _all_idle(temporal, hosts), bool, timeout_s=120, what="every host idle"
    )
    await asyncio.sleep(0)  # query loggers run with loop.call_soon
    counted = [s for s in statements if not s.strip().upper().startswith(CONTROL)]

    for host in hosts:
        status = await client.thread_status(host)
        assert [s.outcome for s in status.submissions] == ["completed"] * SUBMISSIONS
    per_unit = len(counted) / UNITS
    assert per_unit <= MAX_STATEMENTS_PER_UNIT, (per_unit, _by_text(counted))
    events = await _host_events(temporal, hosts)
    assert events / UNITS <= MAX_EVENTS_PER_UNIT, events / UNITS


def _by_text(statements: list[str]) -> dict[str, int]:
    """The counted statements grouped by their first 80 characters (the failure message)."""
    grouped: dict[str, int] = {}
    for text in statements:
        key = " ".join(text.split())[:80]
        grouped[key] = grouped.get(key, 0) + 1
    return dict(sorted(grouped.items(), key=lambda kv: -kv[1]))
