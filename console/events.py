"""Server-sent events: a thread's new records, live, from the ledger's LISTEN/NOTIFY feed.

``GET /threads/{thread_id}/events?after=N`` streams each record above sequence ``N`` (or the
``Last-Event-ID`` a reconnecting browser sends) as an ``event: record`` whose data is the
timeline's HTML for it, escaped like the page. It rides the console's `LedgerFeed`: one
listening connection for every stream, subscribed before the first read, so nothing committed
in between is missed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from jinja2 import Template
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from threadwarden.console.feed import StreamsFull
from threadwarden.console.security import is_number
from threadwarden.console.web import Console, console_of
from threadwarden.errors import InvalidInput
from threadwarden.ledger.deltas import Delta
from threadwarden.validation import validate_id

KEEPALIVE_S = 15.0
"""A stream with no record for this long gets a comment, so proxies keep it open."""
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def resume_after(request: Request) -> int:
    """The sequence a stream resumes after: the larger of ``?after=`` and ``Last-Event-ID``
    (0 when neither is a number; `threadwarden.console.api` refuses a malformed one)."""
    values = [request.query_params.get("after", ""), request.headers.get("last-event-id", "")]
    numbers = [int(v) for v in values if is_number(v, 18)]
    return max(numbers, default=0)


async def thread_events(request: Request) -> Response:
    """The thread's records above ``after``, then each new one, as server-sent events."""
    console = console_of(request)
    thread_id = request.path_params["thread_id"]
    try:
        validate_id("thread", thread_id)
    except InvalidInput as error:
        return Response(f"{error}\n", 400, media_type="text/plain")
    if console.feed.full:
        return Response("too many live timelines open\n", 503, media_type="text/plain")
    template = request.app.state.templates.get_template("_record.html")
    return StreamingResponse(
        _stream(console, template, thread_id, resume_after(request)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


async def _stream(
    console: Console, template: Template, thread_id: str, after: int
) -> AsyncIterator[str]:
    yield ": live\n\n"  # the browser's EventSource counts as open from here
    feed = console.feed.follow(thread_id, after, idle_s=KEEPALIVE_S)
    try:
        async with contextlib.aclosing(feed):
            async for record in feed:
                if record is None:
                    yield ": keepalive\n\n"
                    continue
                assert not isinstance(record, Delta)  # the timeline follows records only
                html = template.render(record=record)
                yield sse_event("record", html, record["sequence"])
    except StreamsFull:  # a burst passed the handler's check: the browser retries later
        yield "retry: 5000\n\n"


def sse_event(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event; each line of ``data`` its own ``data:`` field."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    head = f"event: {event}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return f"{head}{lines}\n"
