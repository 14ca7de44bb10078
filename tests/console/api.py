"""What the HTTP API tests share: an httpx session on ``/v1``, reading server-sent events, and a
snapshot of everything the ledger holds (to show that a refusal wrote nothing)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx

from tests.helpers.polling import eventually

JSON_HEADERS = {"content-type": "application/json"}


async def post(http: httpx.AsyncClient, path: str, body: Any, **headers: str) -> httpx.Response:
    """POST ``body`` as JSON to ``path`` (extra headers by keyword, ``_`` for ``-``)."""
    extra = {name.replace("_", "-"): value for name, value in headers.items()}
    return await http.post(path, content=json.dumps(body), headers={**JSON_HEADERS, **extra})


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The API's error document's ``error`` object (asserting its shape)."""
    assert response.headers["content-type"].startswith("application/json"), response.text
    document = response.json()
    assert set(document) == {"error"}, document
    error: dict[str, Any] = document["error"]
    assert {"code", "message"} <= set(error) <= {"code", "message", "field"}, error
    return error


async def ledger_snapshot(pool: asyncpg.Pool[Any]) -> list[Any]:
    """Every row a write could touch: hosts, threads, submissions, records, outbox."""
    tables = ("hosts", "threads", "submissions", "records", "publications")
    found = []
    for table in tables:
        rows = await pool.fetch(f"SELECT * FROM threadwarden.{table} ORDER BY 1")
        found.append([dict(row) for row in rows])
    return found


async def events(
    lines: AsyncIterator[str],
    count: int | None = None,
    *,
    until: Callable[[dict[str, str]], bool] | None = None,
) -> list[dict[str, str]]:
    """The next events of a stream's lines, each as its fields (data lines joined, comments
    skipped): ``count`` of them, or up to the first one ``until`` holds for."""
    found: list[dict[str, str]] = []
    event: dict[str, str] = {}
    async for line in lines:
        if line == "":
            if "event" in event:
                found.append(event)
                if len(found) == count or (until is not None and until(event)):
                    return found
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            event[name] = event[name] + "\n" + value if name in event else value
    raise AssertionError(f"the stream ended after {found}")


async def settled(http: httpx.AsyncClient, submission_id: str) -> dict[str, Any]:
    """The submission once settled (polling ``result?wait=``)."""

    async def read() -> httpx.Response:
        return await http.get(f"/v1/submissions/{submission_id}/result", params={"wait": 5})

    answer = await eventually(read, lambda r: r.status_code == 200, what=f"{submission_id} settled")
    document: dict[str, Any] = answer.json()
    return document


async def state_of(http: httpx.AsyncClient, submission_id: str, wanted: str) -> dict[str, Any]:
    """The submission once its state (or waiting_for) is ``wanted``."""

    async def read() -> dict[str, Any]:
        answer = await http.get(f"/v1/submissions/{submission_id}")
        assert answer.status_code == 200, answer.text
        document: dict[str, Any] = answer.json()
        return document

    return await eventually(
        read, lambda d: wanted in (d["state"], d["waiting_for"]), what=f"{submission_id} {wanted}"
    )
