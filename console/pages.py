"""The four pages (threads, thread, inbox, host) and their JSON twins (``?format=json``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from threadwarden.client.shapes import HOST_STATUS_FIELDS, thread_json
from threadwarden.console.queries import ThreadPage
from threadwarden.console.security import is_number
from threadwarden.console.web import (
    as_json,
    console_of,
    error_json,
    render,
    wants_json,
)
from threadwarden.errors import InvalidInput, NotFound
from threadwarden.ledger.inbox import InboxPage
from threadwarden.validation import validate_id

INBOX_LIMIT = 200


def _query_id(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if value:
        validate_id(name, value)
    return value


def _int_param(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not is_number(value, 18):
        raise InvalidInput(name, "a non-negative integer", value)
    return int(value)


def _refused(request: Request, error: NotFound | InvalidInput) -> Response:
    """A page that cannot be shown: its id is unknown (404) or a parameter is bad (400)."""
    if wants_json(request):
        return error_json(error)
    if isinstance(error, NotFound):
        return render(request, "error.html", 404, title="Not found", error=str(error))
    return render(request, "error.html", 400, title="Bad request", error=str(error))


async def threads(request: Request) -> Response:
    """``/``: the threads whose id starts with ``q``, one page after ``after``."""
    try:
        prefix = _query_id(request, "q")
        after = _query_id(request, "after")
    except InvalidInput as error:
        return _refused(request, error)
    page: ThreadPage = await console_of(request).queries.threads(prefix=prefix, after=after)
    if wants_json(request):
        return as_json(page.model_dump(mode="json"))
    return render(request, "threads.html", title="Threads", page=page, q=prefix)


async def thread_view(request: Request, thread_id: str, **extra: Any) -> Response:
    """The thread page (``extra``: the submit form's values and error, on a refusal)."""
    console = console_of(request)
    try:
        validate_id("thread", thread_id)
        before = _int_param(request, "before")
        status = await console.client.thread_status(thread_id)
    except (NotFound, InvalidInput) as error:
        return _refused(request, error)
    sent = await console.client.messages_sent(thread_id)
    records = await console.queries.records(thread_id, before=before)
    if wants_json(request):
        return as_json(
            {
                **thread_json(status, sent),
                "records": [r.model_dump(mode="json") for r in records.records],
                "older_records": records.older,
            }
        )
    template = "_submissions.html" if request.query_params.get("fragment") else "thread.html"
    last = records.records[-1].sequence if records.records else 0
    return render(
        request,
        template,
        status_code=extra.pop("status_code", 200),
        title=f"Thread {thread_id}",
        thread=status,
        sent=sent,
        records=records,
        last_sequence=last,
        live=before is None,
        form=extra.pop("form", {}),
        **extra,
    )


async def thread(request: Request) -> Response:
    """``/threads/{thread_id}``: submissions FIFO, the record timeline (live), a submit form."""
    return await thread_view(request, request.path_params["thread_id"])


async def inbox_view(request: Request, **extra: Any) -> Response:
    """The inbox page (``extra``: an action's error, on a refusal)."""
    page: InboxPage = await console_of(request).client.inbox(limit=INBOX_LIMIT)
    if wants_json(request):
        return as_json(page.model_dump(mode="json"))
    return render(
        request,
        "inbox.html",
        status_code=extra.pop("status_code", 200),
        title="Inbox",
        page=page,
        **extra,
    )


async def inbox(request: Request) -> Response:
    """``/inbox``: every pending approval and unknown side effect, oldest first, with age."""
    return await inbox_view(request)


async def host(request: Request) -> Response:
    """``/hosts/{host_id}``: the host's maintenance state, its threads, its Temporal workflow."""
    console = console_of(request)
    host_id = request.path_params["host_id"]
    try:
        validate_id("host", host_id)
        after = _query_id(request, "after")
        status = await console.client.host_status(host_id)
    except (NotFound, InvalidInput) as error:
        return _refused(request, error)
    page = await console.queries.host_threads(host_id, after=after)
    workflow_url = None
    if console.temporal_ui_url:
        namespace = quote(console.settings.temporal_namespace, safe="")
        # The list filtered by workflow id: every run of the host (it continues as new).
        query = quote(f'WorkflowId="threadwarden-host/{host_id}"', safe="")
        workflow_url = f"{console.temporal_ui_url}/namespaces/{namespace}/workflows?query={query}"
    if wants_json(request):
        body = status.model_dump(mode="json", include=HOST_STATUS_FIELDS)
        body["threads"] = page.model_dump(mode="json")
        body["workflow_url"] = workflow_url
        return as_json(body)
    return render(
        request,
        "host.html",
        title=f"Host {host_id}",
        host=status,
        page=page,
        workflow_url=workflow_url,
    )
