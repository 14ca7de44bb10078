"""Server-sent events: a thread's new records, live, from the ledger's LISTEN/NOTIFY feed.

``GET /threads/{thread_id}/events?after=N`` streams each record above sequence ``N`` (or the
``Last-Event-ID`` a reconnecting browser sends) as an ``event: record`` whose data is the
timeline's HTML for it, escaped like the page. It rides `ThreadwardenClient.records`: the feed
listens before it reads, so nothing committed in between is missed, and no loop polls.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

from jinja2 import Template
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from threadwarden.console.web import MAX_STREAMS, Console, console_of
from threadwarden.errors import InvalidInput
from threadwarden.validation import validate_id


def _after(request: Request) -> int:
    values = [request.query_params.get("after", ""), request.headers.get("last-event-id", "")]
    numbers = [int(v) for v in values if v.isdigit() and len(v) <= 18]
    return max(numbers, default=0)


async def thread_events(request: Request) -> Response:
    """The thread's records above ``after``, then each new one, as server-sent events."""
    console = console_of(request)
    thread_id = request.path_params["thread_id"]
    try:
        validate_id("thread", thread_id)
    except InvalidInput as error:
        return Response(f"{error}\n", 400, media_type="text/plain")
    if console.streams >= MAX_STREAMS:
        return Response("too many live timelines open\n", 503, media_type="text/plain")
    template = request.app.state.templates.get_template("_record.html")
    return StreamingResponse(
        _stream(console, template, thread_id, _after(request)),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _stream(
    console: Console, template: Template, thread_id: str, after: int
) -> AsyncIterator[str]:
    console.streams += 1
    try:
        yield ": live\n\n"  # the browser's EventSource counts as open from here
        records = console.client.records(thread_id, wait_for_thread=True).__aiter__()
        feed = cast(AsyncGenerator[Any, None], records)  # RecordFeed.__aiter__ is a generator
        async with contextlib.aclosing(feed):
            async for record in feed:
                if record.sequence <= after:
                    continue
                html = template.render(record=record)
                data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
                yield f"event: record\nid: {record.sequence}\n{data}\n"
    finally:
        console.streams -= 1
