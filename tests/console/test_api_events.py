"""The HTTP API's event stream: records as server-sent events, resumed after Last-Event-ID with
no gap and no duplicate, across a restart of the console; one listening connection for all."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import asyncpg
import httpx
import pytest

from tests.console.api import events, settled
from tests.console.conftest import ServeConsole
from tests.console.helpers import serving_console
from threadwarden.client.client import ThreadwardenClient
from threadwarden.reading import placing
from threadwarden.reading import shared as feed_module

CONSOLE = ("console", "--address", "127.0.0.1:0")
"""``threadwarden console`` on the test's ledger (``cli_env``), on any free port."""


async def test_events_start_before_the_thread_exists_and_carry_records_as_watch_json(
    worker: None, client: ThreadwardenClient, http: httpx.AsyncClient, ids: str
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "<b>hi</b>"}])
        found = await asyncio.wait_for(events(stream.aiter_lines(), 1), timeout=30)
    [first] = found
    record = json.loads(first["data"])
    assert first["event"] == "record" and first["id"] == "1"
    committed = (await client.records(ids))[0]
    assert record == json.loads(json.dumps(committed, default=str))  # as `watch --json` prints
    assert (
        record["submission_id"] == receipt.submission_id and record["body"]["text"] == "<b>hi</b>"
    )


async def test_events_resume_after_last_event_id_across_a_console_restart(
    worker: None, cli_env: None, client: ThreadwardenClient, ids: str
) -> None:
    three = [{"say": f"a{n}"} for n in range(3)]
    first = await client.submit(ids, agent_id="scripted", input=three)
    seen: list[int] = []
    async with (
        serving_console(*CONSOLE) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
            got = await asyncio.wait_for(events(stream.aiter_lines(), 2), timeout=30)
            seen += [int(e["id"]) for e in got]
        await settled(http, first.submission_id)
    # That console process is gone; more records commit while no one reads.
    second = await client.submit(ids, agent_id="scripted", input=[{"say": "b"}])
    async with (
        serving_console(*CONSOLE) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        await settled(http, second.submission_id)
        total = len(await client.records(ids))
        headers = {"last-event-id": str(seen[-1])}
        async with http.stream("GET", f"/v1/threads/{ids}/events", headers=headers) as stream:
            got = await asyncio.wait_for(events(stream.aiter_lines(), total - seen[-1]), timeout=30)
            seen += [int(e["id"]) for e in got]
        assert seen == list(range(1, total + 1))  # every record once, none skipped, none twice

        after = {"after": str(total - 1)}
        async with http.stream("GET", f"/v1/threads/{ids}/events", params=after) as stream:
            [last] = await asyncio.wait_for(events(stream.aiter_lines(), 1), timeout=30)
    assert int(last["id"]) == total


async def test_many_streams_share_one_listening_connection(
    worker: None,
    client: ThreadwardenClient,
    http: httpx.AsyncClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    threads = [f"{ids}-{n}" for n in range(20)]
    async with contextlib.AsyncExitStack() as opened:
        streams = [
            await opened.enter_async_context(http.stream("GET", f"/v1/threads/{t}/events"))
            for t in threads
        ]
        assert {stream.status_code for stream in streams} == {200}
        for thread_id in threads:
            await client.submit(thread_id, agent_id="scripted", input=[{"say": thread_id}])
        for thread_id, stream in zip(threads, streams, strict=True):
            [event] = await asyncio.wait_for(events(stream.aiter_lines(), 1), timeout=30)
            assert json.loads(event["data"])["body"]["text"] == thread_id
        listening = await pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
        )
    assert listening == 1  # 20 streams, one LISTEN connection (the worker's sink only NOTIFYs)


async def test_a_stream_goes_on_when_the_listening_connection_is_killed(
    worker: None,
    client: ThreadwardenClient,
    http: httpx.AsyncClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    async with http.stream("GET", f"/v1/threads/{ids}/events") as stream:
        lines = stream.aiter_lines()
        await client.submit(ids, agent_id="scripted", input=[{"say": "before"}])
        [before] = await asyncio.wait_for(events(lines, 1), timeout=30)
        killed = await pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
        )
        assert killed == 1
        await client.submit(ids, agent_id="scripted", input=[{"say": "after"}])
        later = await asyncio.wait_for(events(lines, 2), timeout=30)
    texts = [json.loads(e["data"])["body"].get("text") for e in [before, *later]]
    assert texts[0] == "before" and "after" in texts
    assert [int(e["id"]) for e in [before, *later]] == [1, 2, 3]  # no gap, no repeat


async def test_streams_end_cleanly_when_the_console_stops(
    serve_console: ServeConsole,
    ids: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every stream's read of the records hangs, as on a ledger slow to answer: the console's
    # stop must not wait for it (a read still out when the server gives up cuts the stream).
    reading = asyncio.Event()
    never = asyncio.Event()

    async def hung_read(*_: Any, **__: Any) -> list[dict[str, Any]]:
        reading.set()
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(placing, "records_after", hung_read)
    async with contextlib.AsyncExitStack() as opened:
        async with serve_console() as url:
            http = await opened.enter_async_context(httpx.AsyncClient(base_url=url, timeout=30))
            lines = []
            for n in range(5):
                path = f"/v1/threads/{ids}-{n}/events"
                stream = await opened.enter_async_context(http.stream("GET", path))
                lines.append(stream.aiter_lines())
            assert [await anext(each) for each in lines] == [": live"] * 5
            await asyncio.wait_for(reading.wait(), timeout=30)
        # The console is gone: each stream ended with its last chunk, none was cut off
        # (a cut-off chunked body raises httpx.RemoteProtocolError here).
        for each in lines:
            rest = [line async for line in each]
            assert all(line == "" or line.startswith(":") for line in rest), rest
    assert "Exception in ASGI application" not in caplog.text


async def test_a_burst_of_streams_past_the_limit_is_refused_not_served(
    worker: None,
    client: ThreadwardenClient,
    serve_console: ServeConsole,
    ids: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feed_module, "MAX_STREAMS", 3)
    async with (
        serve_console() as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
        contextlib.AsyncExitStack() as opened,
    ):

        async def open_one(n: int) -> httpx.Response:
            path = f"/v1/threads/{ids}-{n}/events"
            return await opened.enter_async_context(http.stream("GET", path))

        streams = await asyncio.gather(*(open_one(n) for n in range(8)))  # all at once
        refused = [s for s in streams if s.status_code == 503]
        started = [s for s in streams if s.status_code == 200]
        for n in range(8):
            await client.submit(f"{ids}-{n}", agent_id="scripted", input=[{"say": "x"}])
        kinds = []
        for stream in started:
            [event] = await asyncio.wait_for(events(stream.aiter_lines(), 1), timeout=30)
            kinds.append(event["event"])
    assert len(refused) + len(started) == 8
    assert kinds.count("record") <= 3  # never more followers than the limit
    assert kinds.count("record") + kinds.count("error") == len(started)
    assert len(refused) + kinds.count("error") >= 5  # the rest were told to come back
