"""Calls awaited together when the attempt is cut off (a deploy, its time) while one of them is
still between its committed ``call-started`` and its wait: the others must not suspend the
parent on a wait that leaves it out (a ``children-awaited`` listing part of the calls). Found
by the chaos run: the batch's gatherer outlived the cancelled handler and suspended on the
call that had registered."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tests.helpers.ledger import Ledger
from threadwarden.activities.child_calls import ChildCalls
from threadwarden.activities.context import JournaledContext
from threadwarden.activities.journal import Journal
from threadwarden.activities.wake import Waker
from threadwarden.ledger.children import Children

LATER = datetime.now(UTC) + timedelta(days=1)


class SlowWaker(Waker):
    """Wakes the first child's host at once; the second's hangs (a slow Temporal RPC)."""

    def __init__(self) -> None:
        super().__init__(None, task_queue="unused")
        self.woken: list[str] = []
        self.hanging = asyncio.Event()

    async def wake(self, host_id: str, *, reason: str) -> None:
        self.woken.append(host_id)
        if len(self.woken) == 2:
            self.hanging.set()
            await asyncio.Event().wait()


async def test_a_cut_off_attempt_does_not_suspend_on_part_of_its_calls(
    pool: asyncpg.Pool[Any], ids: str
) -> None:
    ledger = Ledger.defaults(pool)
    await ledger.admit(ids)
    await ledger.begin(ids)
    claim = await ledger.claim(ids)
    waker = SlowWaker()
    children = Children(pool, ledger.admissions, minimum_alarm_delay_ms=50)
    journal = Journal(claim, ledger.attempts, LATER)
    context = JournaledContext(journal, calls=ChildCalls(journal, children, waker))

    async def handler() -> Any:
        return await asyncio.gather(
            context.call_agent("helper", {"n": 1}), context.call_agent("helper", {"n": 2})
        )

    running = asyncio.ensure_future(handler())
    await asyncio.wait_for(waker.hanging.wait(), 10)  # both started; one is still waking
    running.cancel()  # the attempt is cut off
    await asyncio.gather(running, return_exceptions=True)
    await context.close(cut_off=True)

    kinds = await pool.fetch(
        "SELECT kind FROM threadwarden.records WHERE submission_id = $1 ORDER BY sequence",
        claim.submission_id,
    )
    assert [r["kind"] for r in kinds] == ["call-started", "call-started"]  # no wait recorded
    state = await pool.fetchval(
        "SELECT state FROM threadwarden.submissions WHERE submission_id = $1",
        claim.submission_id,
    )
    assert state == "running"  # not suspended: its re-run waits for both calls
