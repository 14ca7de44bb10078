"""The live timeline: server-sent events from the ledger's record feed."""

from __future__ import annotations

import asyncio

import httpx

from tests.console.api import events
from tests.console.helpers import submit_until
from threadwarden.client.client import ThreadwardenClient


async def test_console_events_stream_new_records_live_and_escaped(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    await submit_until(client, ids, [{"say": "before"}], "completed")
    seen = len(await client.records(ids))
    async with http.stream("GET", f"/threads/{ids}/events", params={"after": seen}) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        second = await client.submit(ids, agent_id="scripted", input=[{"say": "<b>live</b>"}])
        got = await asyncio.wait_for(events(stream.aiter_lines(), 2), timeout=30)
    assert [e["event"] for e in got] == ["record", "record"]
    assert [int(e["id"]) for e in got] == [seen + 1, seen + 2]  # nothing before `after`
    assert "&lt;b&gt;live&lt;/b&gt;" in got[0]["data"] and "<b>" not in got[0]["data"]
    assert second.submission_id in got[0]["data"]
    assert f'id="record-{seen + 1}"' in got[0]["data"]


async def test_console_events_wait_for_a_thread_that_does_not_exist_yet(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream(
        "GET", f"/threads/{ids}/events", headers={"last-event-id": "0"}
    ) as stream:
        await client.submit(ids, agent_id="scripted", input=[{"say": "first"}])
        [event] = await asyncio.wait_for(events(stream.aiter_lines(), 1), timeout=30)
    assert event["id"] == "1" and "first" in event["data"]
