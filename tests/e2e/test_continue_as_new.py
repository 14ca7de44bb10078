"""A host whose backlog outlasts one run continues as new without losing work or wakes."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowExecutionStatus

from tests.helpers.checks import assert_settled_once, converged, say
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.worker.runtime import Connections, connect_temporal
from threadwarden.workflows.contracts import host_workflow_id
from threadwarden.workflows.host import MAX_PASSES_PER_RUN


@pytest.mark.slow
@pytest.mark.xdist_group("slow")  # the long, heavy tests one after another
@pytest.mark.timeout(600)
async def test_backlog_longer_than_a_run_continues_as_new_with_wakes_pending(
    worker: None, client: ThreadwardenClient, connections: Connections, ids: str
) -> None:
    threads = [f"{ids}-{n}" for n in range(3)]
    per_thread = MAX_PASSES_PER_RUN // len(threads) + 5  # more heads than one run has passes

    async def submit_all(thread: str) -> None:
        for k in range(per_thread):  # wakes keep arriving while the run is passing
            await client.submit(
                thread, agent_id="scripted", input=say(f"{thread} #{k}"), host_id=ids
            )

    await asyncio.gather(*(submit_all(t) for t in threads))
    for thread in threads:  # over a hundred passes in a row: minutes on a loaded machine
        await assert_settled_once(client, thread, per_thread, timeout_s=300)
    await converged(client, ids)

    temporal = await connect_temporal(connections.temporal_address, "default")
    query = f"WorkflowId = '{host_workflow_id(ids)}'"

    async def runs() -> list[WorkflowExecutionStatus | None]:
        return [run.status async for run in temporal.list_workflows(query)]

    await eventually(
        runs, lambda r: WorkflowExecutionStatus.CONTINUED_AS_NEW in r, what="a continued run"
    )
