"""``threadwarden watch THREAD`` on a thread that does not exist yet waits for it, as
``tail -F`` does (issue 12, CLI): a client can subscribe before it posts its first message.
The client's twin is tests/client/test_client_records_feed.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import console
from tests.helpers.feed import listening
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient

pytestmark = pytest.mark.usefixtures("cli_env", "worker")

READ_TIMEOUT_S = 60


async def read_until(stream: asyncio.StreamReader, done: Callable[[str], bool]) -> list[str]:
    """Lines from ``stream`` up to and including the first for which ``done`` holds."""
    lines: list[str] = []
    while not lines or not done(lines[-1]):
        line = await asyncio.wait_for(stream.readline(), READ_TIMEOUT_S)
        assert line, f"the stream ended after {lines}"
        lines.append(line.decode().rstrip("\n"))
    return lines


async def test_cli_watch_waits_for_a_thread_then_prints_its_records(
    client: ThreadwardenClient, ids: str
) -> None:
    async with console({}, "watch", ids) as watching:
        assert watching.stderr is not None and watching.stdout is not None
        note = await asyncio.wait_for(watching.stderr.readline(), READ_TIMEOUT_S)
        assert note.decode().strip() == (
            f"threadwarden: thread {ids} does not exist yet; waiting for it"
        )
        assert watching.returncode is None
        receipt = await client.submit(ids, agent_id="scripted", input=[{"say": "first"}])
        lines = await read_until(watching.stdout, lambda line: "settlement" in line)
        assert watching.returncode is None  # still following
    assert all(receipt.submission_id in line for line in lines)
    assert any(line.endswith(f"{receipt.submission_id}  first") for line in lines)  # its text
    assert [int(line.split()[0]) for line in lines] == list(range(1, len(lines) + 1))


async def test_cli_watch_json_before_the_thread_exists_gets_every_record(
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    async with console({}, "watch", ids, "--json") as watching:
        assert watching.stdout is not None
        # The watcher is reading the (empty) thread in its loop before the thread exists.
        await eventually(lambda: listening(pool), lambda n: n == 1, what="the watcher waiting")
        assert watching.returncode is None
        first = await client.submit(ids, agent_id="scripted", input=[{"say": "one"}])
        second = await client.submit(ids, agent_id="scripted", input=[{"say": "two"}])
        lines = await read_until(
            watching.stdout,
            lambda line: (
                (json.loads(line)["submission_id"], json.loads(line)["kind"])
                == (second.submission_id, "settlement")
            ),
        )
    records = [json.loads(line) for line in lines]
    assert [r["sequence"] for r in records] == list(range(1, len(records) + 1))
    assert {r["submission_id"] for r in records} == {first.submission_id, second.submission_id}
    settlements = [r["submission_id"] for r in records if r["kind"] == "settlement"]
    assert settlements == [first.submission_id, second.submission_id]
