"""The application's worker: its own workflow and activity, and threadwarden through the plugin,
on one task queue and one Temporal client.

    DATABASE_URL=postgresql://… TEMPORAL_ADDRESS=localhost:7233 python worker.py

Before the first start: ``threadwarden migrate`` and ``threadwarden setup`` against the same
Postgres and Temporal namespace.
"""

import asyncio
import os

from agents import bindings
from temporalio.client import Client
from temporalio.worker import Worker

from activities import compose_greeting
from threadwarden import Settings, ThreadwardenPlugin
from workflows import GreetingWorkflow

TASK_QUEUE = os.environ.get("APP_TASK_QUEUE", "hello-app")


async def main() -> None:
    plugin = ThreadwardenPlugin(
        bindings=bindings,
        database=os.environ["DATABASE_URL"],
        settings=Settings(task_queue=TASK_QUEUE),  # threadwarden on the application's queue
    )
    client = await Client.connect(
        os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"), plugins=[plugin]
    )
    worker = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[GreetingWorkflow],
        activities=[compose_greeting],
    )
    print(f"worker on {TASK_QUEUE}", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
