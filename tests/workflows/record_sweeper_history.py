"""Record a sweeper-workflow history for the replay tests.

Run ``.venv/bin/python -m tests.workflows.record_sweeper_history`` after an intentional change to
the sweeper's commands and commit the new file in place of the old one (nothing is released:
no patch markers).
"""

import asyncio
from pathlib import Path

from tests.helpers.polling import eventually
from tests.workflows.recording import recording_stack
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.connect import Connections, connect_temporal
from threadwarden.ledger.admission import Admissions
from threadwarden.ledger.pool import create_pool
from threadwarden.worker.runtime import running_worker
from threadwarden.workflows.contracts import sweeper_workflow_id

HERE = Path(__file__).parent / "histories"
VERSION = "v4"
"""Bump when the sweeper's commands change (and delete the older sweeper history)."""


async def record() -> None:
    async with recording_stack(
        sweep_interval_ms=200, sweep_idle_interval_ms=1_000, sweep_grace_ms=200
    ) as (connections, settings):
        pool = await create_pool(connections.database_url, max_size=2)
        try:
            async with (
                running_worker(settings, connections),
                ThreadwardenClient.connect(settings, connections) as client,
            ):
                # A wake that was never sent: the sweeper must find and wake the host.
                receipt = await Admissions(pool, minimum_alarm_delay_ms=50).admit(
                    thread_id="replay-lost-wake", agent_id="scripted", input=[{"say": "hi"}]
                )
                await eventually(
                    lambda: client.thread_status(receipt.thread_id),
                    lambda s: s.submissions[0].state == "settled",
                )
                await _save(connections, settings.task_queue)
        finally:
            await pool.close()


async def _save(connections: Connections, task_queue: str) -> None:
    temporal = await connect_temporal(connections.temporal_address, "default")
    handle = temporal.get_workflow_handle(sweeper_workflow_id(task_queue))

    async def sweeps() -> int:
        history = await handle.fetch_history()
        return sum(1 for e in history.events if e.HasField("timer_fired_event_attributes"))

    await eventually(sweeps, lambda n: n >= 3)  # a few sweeps after the wake (a partial run)
    name = f"sweeper_{VERSION}.json"
    (HERE / name).write_text((await handle.fetch_history()).to_json())
    print(f"recorded {name}")


if __name__ == "__main__":
    asyncio.run(record())
