"""Live text in ``threadwarden watch`` and `ThreadwardenClient.stream` (issue 31, item 3): a
model's answer shows as it is generated, beside the records, the whole text once and before the
step's journaled response; a reader that arrives mid-answer first gets the text so far."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

import threadwarden
from tests.helpers.cli import console, run_cli
from tests.helpers.polling import eventually
from tests.worker.test_cli_watch import listening
from threadwarden.cli.watch import TEXT_MARK
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import FeedRecord
from threadwarden.client.live_text import TextDelta
from threadwarden.ledger.deltas import Deltas
from threadwarden.worker.settings import Settings

ANSWER = " ".join(f"word{n}" for n in range(40))
STREAM = [{"stream": ANSWER, "chunk_ms": 100}]
"""40 words, one every 100 ms: about 4 s of live text."""
DEADLINE_S = 60.0
KINDS = ["tool-call", "tool-result", "message", "settlement"]
"""The records of a one-step stream script."""


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """No inline heads: a 4 s turn would pass the inline budget and start over on the agent's
    queue (test_watch_live_text_restart.py shows that)."""
    return settings.model_copy(update={"inline_budget_ms": 0})


async def chunks_until(stream: asyncio.StreamReader, end: str) -> list[str]:
    """What ``stream`` gives, one piece per read, until the output holds ``end``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    pieces: list[str] = []
    while end not in "".join(pieces):
        piece = await asyncio.wait_for(stream.read(65_536), max(deadline - loop.time(), 0))
        assert piece, f"the output ended after {pieces}"
        pieces.append(piece.decode())
    return pieces


async def test_watch_prints_the_answer_growing_then_its_record(
    cli_env: None, worker: None, client: ThreadwardenClient, ids: str
) -> None:
    async with console({}, "watch", ids) as watching:
        assert watching.stdout is not None and watching.stderr is not None
        await asyncio.wait_for(watching.stderr.readline(), DEADLINE_S)  # waiting for the thread
        receipt = await client.submit(ids, agent_id="scripted", input=STREAM)
        pieces = await chunks_until(watching.stdout, " settlement ")
    sub = receipt.submission_id
    output = "".join(pieces)
    lines = output.splitlines()
    prefix = f"{TEXT_MARK:>6}  {'step 1':<18} {sub}  "
    [live] = [n for n, line in enumerate(lines) if line.startswith(prefix)]
    assert lines[live] == prefix + ANSWER  # the whole text, once, on its own line
    assert lines[live - 1].split()[:2] == ["1", "tool-call"]  # after the call's record
    assert lines[live + 1].split()[:2] == ["2", "tool-result"]  # ended before the response
    assert [line.split()[1] for n, line in enumerate(lines) if n != live] == KINDS
    # It grew: the live line came in many reads before the response's record.
    start = next(n for n, piece in enumerate(pieces) if TEXT_MARK in piece)
    end = next(n for n, piece in enumerate(pieces) if " tool-result " in piece)
    assert end - start >= 10, pieces


async def test_watch_json_prints_delta_lines_beside_the_records(
    cli_env: None,
    worker: None,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    ids: str,
) -> None:
    async with (
        console({}, "watch", ids, "--json") as watching,
        console({}, "watch", ids, "--json", "--no-text") as records_only,
    ):
        assert watching.stdout is not None and records_only.stdout is not None
        # Both follow before the answer starts (a late watcher gets the text so far at once).
        await eventually(lambda: listening(pool), lambda n: n == 2, what="both watchers waiting")
        receipt = await client.submit(ids, agent_id="scripted", input=STREAM)
        output = "".join(await chunks_until(watching.stdout, '"kind": "settlement"'))
        plain = "".join(await chunks_until(records_only.stdout, '"kind": "settlement"'))
    lines = [json.loads(line) for line in output.splitlines()]
    deltas = [line["delta"] for line in lines if "delta" in line]
    assert len(deltas) >= 10, lines
    assert all(set(d) == {"submission_id", "step", "text", "restart"} for d in deltas)
    assert {(d["submission_id"], d["step"], d["restart"]) for d in deltas} == {
        (receipt.submission_id, 1, False)
    }
    assert "".join(d["text"] for d in deltas) == ANSWER
    kinds = ["delta" if "delta" in line else line["kind"] for line in lines]
    assert kinds == ["tool-call", *["delta"] * len(deltas), *KINDS[1:]]
    records = [line for line in lines if "delta" not in line]
    assert [r["sequence"] for r in records] == [1, 2, 3, 4]
    assert records[1]["body"]["result"] == ANSWER
    assert [json.loads(line) for line in plain.splitlines()] == records  # --no-text: records


async def test_client_stream_yields_the_deltas_and_the_records_in_order(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    assert threadwarden.TextDelta is TextDelta  # public, loaded on first access

    async def until_settled() -> list[FeedRecord | TextDelta]:
        seen: list[FeedRecord | TextDelta] = []
        async for item in client.stream(ids, wait_for_thread=True):
            seen.append(item)
            if isinstance(item, FeedRecord) and item.kind == "settlement":
                return seen
        raise AssertionError("the stream ended")

    following = asyncio.create_task(until_settled())
    receipt = await client.submit(ids, agent_id="scripted", input=STREAM)
    seen = await asyncio.wait_for(following, DEADLINE_S)
    deltas = [item for item in seen if isinstance(item, TextDelta)]
    records = [item for item in seen if isinstance(item, FeedRecord)]
    assert len(deltas) >= 10
    assert "".join(d.text for d in deltas) == ANSWER
    assert {(d.submission_id, d.step, d.restart) for d in deltas} == {
        (receipt.submission_id, 1, False)
    }
    assert [r.sequence for r in records] == [1, 2, 3, 4]
    assert [r.kind for r in records] == KINDS
    kinds = ["delta" if isinstance(item, TextDelta) else item.kind for item in seen]
    assert kinds == ["tool-call", *["delta"] * len(deltas), *KINDS[1:]]


async def text_so_far(pool: asyncpg.Pool[Any], thread_id: str) -> str:
    async with pool.acquire() as conn:
        return "".join(row.text or "" for row in await Deltas.so_far(conn, thread_id))


async def first_items(feed: AsyncIterator[FeedRecord | TextDelta], n: int) -> list[Any]:
    return [await anext(feed) for _ in range(n)]


async def test_a_stream_started_mid_answer_gets_the_text_so_far_first(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=STREAM)
    early = await eventually(
        lambda: text_so_far(pool, ids), lambda text: len(text.split()) >= 5, what="5 words"
    )
    seen: list[FeedRecord | TextDelta] = []
    async for item in client.stream(ids):
        seen.append(item)
        if isinstance(item, FeedRecord) and item.kind == "settlement":
            break
    first, catch_up = seen[:2]
    assert isinstance(first, FeedRecord) and first.kind == "tool-call"
    assert isinstance(catch_up, TextDelta) and catch_up.text.startswith(early)  # all, at once
    deltas = [item.text for item in seen if isinstance(item, TextDelta)]
    assert "".join(deltas) == ANSWER  # then the rest: the whole text, once
    assert len(deltas) >= 2


async def test_watch_no_follow_prints_the_records_without_live_text(
    cli_env: None,
    worker: None,
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    await client.submit(ids, agent_id="scripted", input=STREAM)
    await eventually(lambda: text_so_far(pool, ids), bool, what="live text")
    assert await run_cli("watch", ids, "--no-follow") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["1", "tool-call"]
    assert all(line.split()[0].isdigit() for line in lines), lines  # record lines only


async def test_a_new_reader_shows_no_text_left_over_by_a_settled_submission(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    """Rows a worker left (its clear failed, or a cut-off step's submission failed without a
    re-run) are not live text: the records that closed their steps are there."""
    receipt = await client.submit(
        ids, agent_id="scripted", input=[{"stream": "a b", "chunk_ms": 1}]
    )
    await client.result(receipt.submission_id, timeout=DEADLINE_S)
    sub = receipt.submission_id
    await pool.executemany(
        "INSERT INTO threadwarden.deltas (submission_id, step, thread_id, epoch, text)"
        " VALUES ($1, $2, $3, 1, 'stale')",
        [(sub, 1, ids), (sub, 9, ids)],  # its journaled step, and one that never completed
    )
    seen: list[FeedRecord | TextDelta] = []
    async for item in client.stream(ids):
        seen.append(item)
        if isinstance(item, FeedRecord) and item.kind == "settlement":
            break
    assert [item.kind for item in seen if isinstance(item, FeedRecord)] == KINDS
    assert not [item for item in seen if isinstance(item, TextDelta)]
