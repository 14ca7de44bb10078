"""Admissions through `ThreadwardenClient` count on the application's own meter provider."""

from __future__ import annotations

import asyncio
import json
import sys
from textwrap import dedent

from threadwarden.config.connect import Connections

SCRIPT = dedent(
    """
    import asyncio, json, os, sys
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from threadwarden import Settings, ThreadwardenClient

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

    async def main() -> None:
        database, address, queue = sys.argv[1:4]
        temporal = await Client.connect(address, data_converter=pydantic_data_converter)
        settings = Settings(task_queue=queue)
        async with ThreadwardenClient.from_client(
            temporal, database=database, settings=settings
        ) as client:
            await client.submit("counted-1", agent_id="scripted", input=[{"say": "a"}])
            await client.submit("counted-2", agent_id="scripted", input=[{"say": "b"}])
            # the same idempotency key twice: one admission
            for _ in range(2):
                await client.submit(
                    "counted-3", agent_id="scripted", input=[{"say": "c"}], idempotency_key="k"
                )
        points = [
            (dict(p.attributes), p.value)
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "threadwarden_submissions_admitted"
            for p in m.data.data_points
        ]
        print(json.dumps(points), flush=True)

    asyncio.run(main())
    # As the CLI does (docs/operations.md): finalizing beside the Temporal SDK's native threads
    # may abort a process that has done its work (temporalio/sdk-python#300).
    os._exit(0)
    """
)


async def test_client_admissions_count_on_the_applications_meter_provider(
    connections: Connections,
) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        connections.database_url,
        connections.temporal_address,
        "tq-client-metrics",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().strip().splitlines()[-1]) == [[{"source": "client"}, 3]]
