"""Runs the application's workflow and admits a submission to the greeter agent, then prints
both outcomes as JSON.

    DATABASE_URL=postgresql://… TEMPORAL_ADDRESS=localhost:7233 python starter.py
"""

import asyncio
import json
import os
import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from threadwarden import Settings, ThreadwardenClient
from workflows import GreetingWorkflow

TASK_QUEUE = os.environ.get("APP_TASK_QUEUE", "hello-app")


async def main() -> None:
    temporal = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
        data_converter=pydantic_data_converter,
    )
    greeting = await temporal.execute_workflow(
        GreetingWorkflow.run,
        "Temporal",
        id=f"greeting-{uuid.uuid4().hex[:8]}",
        task_queue=TASK_QUEUE,
    )
    async with ThreadwardenClient.from_client(
        temporal, database=os.environ["DATABASE_URL"], settings=Settings(task_queue=TASK_QUEUE)
    ) as client:
        receipt = await client.submit(
            f"thread-{uuid.uuid4().hex[:8]}", agent_id="greeter", input={"name": "threadwarden"}
        )
        result = await client.result(receipt.submission_id, timeout=60)
    print(json.dumps({"workflow": greeting, "submission": result.model_dump(mode="json")}))


if __name__ == "__main__":
    asyncio.run(main())
