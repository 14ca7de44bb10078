"""The live timeline: server-sent events from the ledger's record feed."""

from __future__ import annotations

import asyncio

import httpx

from tests.console.helpers import wait_for_state
from threadwarden.client.client import ThreadwardenClient


async def _events(response: httpx.Response, count: int) -> list[dict[str, str]]:
    """The next ``count`` events of the stream, each as its fields (data lines joined)."""
    found: list[dict[str, str]] = []
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "event" in event:
                found.append(event)
                if len(found) == count:
                    return found
            event = {}
            continue
        name, _, value = line.partition(": ")
        if name == "data" and "data" in event:
            event["data"] += "\n" + value
        elif name in ("event", "id", "data"):
            event[name] = value
    raise AssertionError(f"the stream ended after {found}")


async def test_console_events_stream_new_records_live_and_escaped(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    first = await client.submit(ids, agent_id="scripted", input=[{"say": "before"}])
    await wait_for_state(client, ids, first.submission_id, "completed")
    seen = len(await client.records(ids))
    async with http.stream("GET", f"/threads/{ids}/events", params={"after": seen}) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        second = await client.submit(ids, agent_id="scripted", input=[{"say": "<b>live</b>"}])
        events = await asyncio.wait_for(_events(stream, 2), timeout=30)
    assert [e["event"] for e in events] == ["record", "record"]
    assert [int(e["id"]) for e in events] == [seen + 1, seen + 2]  # nothing before `after`
    assert "&lt;b&gt;live&lt;/b&gt;" in events[0]["data"] and "<b>" not in events[0]["data"]
    assert second.submission_id in events[0]["data"]
    assert f'id="record-{seen + 1}"' in events[0]["data"]


async def test_console_events_wait_for_a_thread_that_does_not_exist_yet(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream(
        "GET", f"/threads/{ids}/events", headers={"last-event-id": "0"}
    ) as stream:
        await client.submit(ids, agent_id="scripted", input=[{"say": "first"}])
        [event] = await asyncio.wait_for(_events(stream, 1), timeout=30)
    assert event["id"] == "1" and "first" in event["data"]
