"""Server-sent events: a thread's new records and the live text of its steps, from the ledger's
LISTEN/NOTIFY feed (`threadwarden.reading.shared`).

``GET /threads/{thread_id}/events?after=N`` streams each record above sequence ``N`` (or the
``Last-Event-ID`` a reconnecting browser sends) as an ``event: record`` whose data is the
timeline's HTML for it, escaped like the page. Between the records come ``event: delta``
events: the live text of a step while its model generates it, as JSON ``{"submission_id",
"step", "text", "restart"}`` like the API's (the page shows ``text`` as text, never as HTML;
``restart``: the step started over, drop what was shown of it). It rides the console's
`LedgerFeed`: one listening connection for every stream, subscribed before the first read, so
nothing committed in between is missed.

The record that ends a step's live text is its ``tool-result`` (the journaled response). The
ledger's record rows read by the feed do not carry their step, so the stream looks it up (one
primary-key read) for a ``tool-result`` of a submission whose live text it has shown, or for
every ``tool-result`` of a resumed stream (the page may hold live text from before it
reconnected), and renders it with ``data-step``: the page then replaces that step's live text
with the record.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from jinja2 import Template
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from threadwarden.console.security import is_number
from threadwarden.console.web import Console, console_of
from threadwarden.errors import InvalidInput
from threadwarden.reading.shared import StreamsFull
from threadwarden.reading.text import TextDelta
from threadwarden.validation import validate_id

KEEPALIVE_S = 15.0
"""A stream with no record for this long gets a comment, so proxies keep it open."""
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}

_STEP_OF = "SELECT step FROM threadwarden.records WHERE thread_id = $1 AND sequence = $2"
"""A record's step (``records_pkey``): which step's live text a ``tool-result`` ends."""


def resume_after(request: Request) -> int:
    """The sequence a stream resumes after: the larger of ``?after=`` and ``Last-Event-ID``
    (0 when neither is a number; `threadwarden.console.api_threads` refuses a malformed one)."""
    values = [request.query_params.get("after", ""), request.headers.get("last-event-id", "")]
    numbers = [int(v) for v in values if is_number(v, 18)]
    return max(numbers, default=0)


async def thread_events(request: Request) -> Response:
    """The thread's records above ``after``, then each new one, and the live text of its
    steps, as server-sent events."""
    console = console_of(request)
    thread_id = request.path_params["thread_id"]
    try:
        validate_id("thread", thread_id)
    except InvalidInput as error:
        return Response(f"{error}\n", 400, media_type="text/plain")
    if console.feed.full:
        return Response("too many live timelines open\n", 503, media_type="text/plain")
    template = request.app.state.templates.get_template("_record.html")
    resumed = "last-event-id" in request.headers
    shown = _LiveSteps(console, template, thread_id, every_result=resumed)
    return event_stream(
        console,
        thread_id,
        resume_after(request),
        record=shown.record,
        delta=shown.delta,
        refused="retry: 5000\n\n",  # the browser retries later
    )


def event_stream(
    console: Console,
    thread_id: str,
    after: int,
    *,
    record: Callable[[dict[str, Any]], Awaitable[str]],
    delta: Callable[[TextDelta], str | None],
    refused: str,
) -> StreamingResponse:
    """The thread's records above ``after``, then each new one, and the live text of its
    steps, as server-sent events (the page's and the API's): each record as ``record`` writes
    it, each fragment as ``delta`` does (None: not shown); ``refused`` ends a stream that a
    burst let past its handler's check (`StreamsFull`, at its first read)."""

    async def events() -> AsyncIterator[str]:
        yield ": live\n\n"  # the browser's EventSource counts as open from here
        feed = console.feed.follow(thread_id, after, idle_s=KEEPALIVE_S, live=True)
        try:
            async with contextlib.aclosing(feed):
                async for item in feed:
                    if item is None:
                        yield ": keepalive\n\n"
                    elif not isinstance(item, TextDelta):
                        yield await record(item)
                    elif (event := delta(item)) is not None:
                        yield event
        except StreamsFull:
            yield refused

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


class _LiveSteps:
    """The steps whose live text one stream has shown, and the steps it has seen journaled."""

    def __init__(
        self, console: Console, template: Template, thread_id: str, *, every_result: bool
    ) -> None:
        self._console = console
        self._template = template
        self._thread_id = thread_id
        self._every_result = every_result
        self._live: set[tuple[str, int]] = set()
        self._journaled: set[tuple[str, int]] = set()
        self._settled: set[str] = set()

    def delta(self, delta: TextDelta) -> str | None:
        """The event of a fragment (None: its step's record is shown already)."""
        key = (delta.submission_id, delta.step)
        if key in self._journaled or delta.submission_id in self._settled:
            return None
        self._live.add(key)
        return delta_event(delta)

    async def record(self, record: dict[str, Any]) -> str:
        """The event of a record: the timeline's HTML for it, with its step when it ends a
        step's live text."""
        html = self._template.render(record=record, step=await self._step(record))
        return sse_event("record", html, record["sequence"])

    async def _step(self, record: dict[str, Any]) -> int | None:
        """The record's step when it ends a step's live text (a ``tool-result``), else None."""
        submission_id = record["submission_id"]
        if record["kind"] == "settlement":
            self._settled.add(submission_id)
            self._live = {key for key in self._live if key[0] != submission_id}
            return None
        if record["kind"] != "tool-result":
            return None
        if not self._every_result and not any(key[0] == submission_id for key in self._live):
            return None
        step = await self._console.pool.fetchval(_STEP_OF, self._thread_id, record["sequence"])
        if not isinstance(step, int):
            return None
        self._live.discard((submission_id, step))
        self._journaled.add((submission_id, step))
        return step


def delta_event(delta: TextDelta) -> str:
    """A fragment of a step's live text as an ``event: delta``, the page's and the API's alike:
    data ``{"submission_id", "step", "text", "restart"}`` (`TextDelta`; ``restart``: the step
    started over, drop what was shown of it), no id (``Last-Event-ID`` is a record's)."""
    return sse_event("delta", json.dumps(delta.model_dump()))


def sse_event(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event; each line of ``data`` its own ``data:`` field."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    head = f"event: {event}\n" + ("" if event_id is None else f"id: {event_id}\n")
    return f"{head}{lines}\n"
