"""A host whose backlog outlasts one run continues as new without losing work or wakes."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.helpers.checks import assert_settled_once, converged, say
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.ledger.admission import Admissions, payload_digest
from threadwarden.workflows.contracts import host_workflow_id
from threadwarden.workflows.host import MAX_PASSES_PER_RUN

LATE = 3
"""Submissions per thread admitted (each with its wake) while the backlog's run is passing."""


@pytest.mark.slow
@pytest.mark.xdist_group("slow")  # the long, heavy tests one after another
@pytest.mark.timeout(600)
async def test_backlog_longer_than_a_run_continues_as_new_with_wakes_pending(
    worker: None,
    client: ThreadwardenClient,
    connections: Connections,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    threads = [f"{ids}-{n}" for n in range(3)]
    per_thread = MAX_PASSES_PER_RUN // len(threads) + 5  # more heads than one run has passes
    # The whole backlog commits in one transaction before the one wake: a host that caught up
    # between admissions would complete its run instead of continuing it.
    admissions = Admissions(pool, minimum_alarm_delay_ms=50)
    async with pool.acquire() as conn, conn.transaction():
        for k in range(per_thread):
            for thread in threads:
                steps = say(f"{thread} #{k}")
                await admissions.admit_in(
                    conn,
                    key=f"backlog-{k}",
                    digest=payload_digest("scripted", None, steps, "enqueue"),
                    thread_id=thread,
                    agent_id="scripted",
                    input=steps,
                    host_id=ids,
                )
    await client.wake(ids)
    for k in range(LATE):  # wakes keep arriving while the run is passing
        for thread in threads:
            await client.submit(thread, agent_id="scripted", input=say(f"late #{k}"), host_id=ids)
    for thread in threads:  # over a hundred passes in a row: minutes on a loaded machine
        await assert_settled_once(client, thread, per_thread + LATE, timeout_s=300)
    await converged(client, ids)

    temporal = await connect_temporal(connections.temporal_address, "default")
    query = f"WorkflowId = '{host_workflow_id(ids)}'"

    async def runs() -> list[WorkflowExecutionStatus | None]:
        return [run.status async for run in temporal.list_workflows(query)]

    await eventually(
        runs, lambda r: WorkflowExecutionStatus.CONTINUED_AS_NEW in r, what="a continued run"
    )
