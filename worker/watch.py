"""``threadwarden watch THREAD``: a thread's canonical records, then new ones as they publish."""

import asyncio
import json
from typing import Any

import asyncpg

from ledger.pool import create_pool
from ledger.publication import NOTIFY_CHANNEL
from ledger.status import StatusReader
from worker.cli_output import print_json


def _show(record: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(record)
    else:
        body = json.dumps(record["body"], default=str)
        print(f"{record['sequence']:>6}  {record['kind']:<18} {record['submission_id']}  {body}")
    print(end="", flush=True)


async def watch(database_url: str, thread_id: str, *, as_json: bool, follow: bool) -> int:
    """Print the thread's records in order; with ``follow``, keep printing new ones."""
    pool = await create_pool(database_url, max_size=2)
    listener = await asyncpg.connect(database_url)
    published: asyncio.Queue[str] = asyncio.Queue()
    try:
        reader = StatusReader(pool)
        await reader.thread(thread_id)  # NotFound for an unknown thread
        # Listen before the first read, so nothing published in between is missed.
        await listener.add_listener(NOTIFY_CHANNEL, lambda *args: published.put_nowait(args[-1]))
        last = 0
        while True:
            for record in await reader.records(thread_id):
                if record["sequence"] > last:
                    _show(record, as_json)
                    last = record["sequence"]
            if not follow:
                return 0
            while json.loads(await published.get()).get("thread_id") != thread_id:
                pass
    finally:
        await listener.close()
        await pool.close()
