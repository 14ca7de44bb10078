"""Live text in `ThreadwardenClient.stream` (issue 31, item 3): a model's answer is yielded as
it is generated, beside the records, the whole text once and before the step's journaled
response; a reader that arrives mid-answer first gets the text so far. ``watch``'s twin is
tests/cli/test_watch_live_text.py."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

import threadwarden
from tests.helpers.feed import (
    ANSWER,
    DEADLINE_S,
    KINDS,
    STREAM,
    streamed_until_settled,
    text_so_far,
    without_inline_heads,
)
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import FeedRecord
from threadwarden.config.settings import Settings
from threadwarden.reading.text import TextDelta


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The answer streams on the agent's queue, whole (see `without_inline_heads`)."""
    return without_inline_heads(settings)


async def test_client_stream_yields_the_deltas_and_the_records_in_order(
    worker: None, client: ThreadwardenClient, ids: str
) -> None:
    assert threadwarden.TextDelta is TextDelta  # public, loaded on first access
    following = asyncio.create_task(streamed_until_settled(client, ids, wait_for_thread=True))
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


async def test_a_stream_started_mid_answer_gets_the_text_so_far_first(
    worker: None, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    await client.submit(ids, agent_id="scripted", input=STREAM)
    early = await eventually(
        lambda: text_so_far(pool, ids), lambda text: len(text.split()) >= 5, what="5 words"
    )
    seen = await streamed_until_settled(client, ids)
    first, catch_up = seen[:2]
    assert isinstance(first, FeedRecord) and first.kind == "tool-call"
    assert isinstance(catch_up, TextDelta) and catch_up.text.startswith(early)  # all, at once
    deltas = [item.text for item in seen if isinstance(item, TextDelta)]
    assert "".join(deltas) == ANSWER  # then the rest: the whole text, once
    assert len(deltas) >= 2


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
    seen = await streamed_until_settled(client, ids)
    assert [item.kind for item in seen if isinstance(item, FeedRecord)] == KINDS
    assert not [item for item in seen if isinstance(item, TextDelta)]
