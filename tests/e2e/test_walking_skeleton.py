"""The whole loop: submissions admitted, passes run by Temporal, outcomes in Postgres."""

from __future__ import annotations

import functools
from typing import Any

import asyncpg

from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.views import ThreadStatus


def _all_settled(status: ThreadStatus) -> bool:
    return all(s.state == "settled" for s in status.submissions)


async def test_submissions_settle_in_fifo_order_with_one_settlement_each(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    threads = [f"{ids}-thread-{n}" for n in range(3)]
    for thread in threads:
        for n in range(3):
            await client.submit(
                thread,
                agent_id="scripted",
                input=[{"say": f"{thread} #{n}"}, {"tool": "lookup", "args": {"n": n}}],
            )
    for thread in threads:
        status = await eventually(
            functools.partial(client.thread_status, thread), _all_settled, what=f"{thread} settled"
        )
        assert [s.outcome for s in status.submissions] == ["completed"] * 3
        records = await client.records(thread)
        settlements = [r for r in records if r["kind"] == "settlement"]
        assert [r["submission_id"] for r in settlements] == [
            s.submission_id for s in status.submissions
        ]
        said = [r["body"]["text"] for r in records if r["kind"] == "message"]
        assert said == [f"{thread} #{n}" for n in range(3)]
    host = await client.host_status(threads[0])
    assert host.processed == host.dirty and host.alarm_at is None and host.nonterminal == 0
