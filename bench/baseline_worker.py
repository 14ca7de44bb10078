"""``python -m bench.baseline_worker DSN TEMPORAL_ADDRESS TASK_QUEUE``: the baseline's worker.

Runs the entity workflow and its insert activity on the task queue with a pool of the same size
as a threadwarden worker's default, prints a ready line, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

import asyncpg
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from bench.baseline import EntityWorkflow, RecordActivities

POOL_MAX_SIZE = 10
"""The same database pool size a threadwarden worker uses by default."""


async def serve(dsn: str, temporal_address: str, task_queue: str) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=POOL_MAX_SIZE)
    try:
        client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[EntityWorkflow],
            activities=[RecordActivities(pool).record],
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with worker:
            print(f"bench baseline worker on task queue {task_queue}", flush=True)
            await stop.wait()
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_worker")
    parser.add_argument("dsn")
    parser.add_argument("temporal_address")
    parser.add_argument("task_queue")
    args = parser.parse_args()
    logging.basicConfig(  # the same format as ``threadwarden worker``
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(args.dsn, args.temporal_address, args.task_queue))


if __name__ == "__main__":
    main()
