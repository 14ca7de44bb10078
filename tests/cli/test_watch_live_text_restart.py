"""A step cut off mid-answer starts its live text over (issue 31): a deploy stops the worker
streaming a 4 s answer inline, and the next worker's attempt streams it afresh. ``watch`` says
so on a line of its own, then prints the re-run's text; `ThreadwardenClient.stream` flags the
fragment ``restart``."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import console
from tests.helpers.feed import (
    ANSWER,
    ANSWER_INLINE_BUDGET_MS,
    DEADLINE_S,
    STREAM,
    chunks_until,
    stopped_mid_answer,
    streamed_until_settled,
)
from tests.helpers.workers import Workers
from threadwarden.cli.watch import TEXT_MARK
from threadwarden.client.client import ThreadwardenClient
from threadwarden.client.feed import FeedRecord
from threadwarden.reading.text import TextDelta


@pytest.mark.usefixtures("cli_env")
async def test_watch_and_the_client_show_a_cut_off_step_starting_over(
    workers: Workers, client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
) -> None:
    deployed = workers.tuned(inline_budget_ms=ANSWER_INLINE_BUDGET_MS)
    following = asyncio.create_task(streamed_until_settled(client, ids, wait_for_thread=True))
    async with console({}, "watch", ids) as watching:
        assert watching.stdout is not None and watching.stderr is not None
        await asyncio.wait_for(watching.stderr.readline(), DEADLINE_S)  # waiting for the thread
        async with deployed.running() as first:
            receipt = await client.submit(ids, agent_id="scripted", input=STREAM)
            await stopped_mid_answer(first, pool, ids)
        async with deployed.running():
            output = "".join(await chunks_until(watching.stdout, " settlement "))
            seen = await asyncio.wait_for(following, DEADLINE_S)

    lines = output.splitlines()
    over = [n for n, line in enumerate(lines) if line == f"{TEXT_MARK:>6}  (step 1 started over)"]
    assert over, output
    prefix = f"{TEXT_MARK:>6}  {'step 1':<18} {receipt.submission_id}  "
    assert lines[over[-1] + 1] == prefix + ANSWER  # the re-run's text, whole, once
    assert lines[over[-1] + 2].split()[1] == "tool-result"

    deltas = [item for item in seen if isinstance(item, TextDelta)]
    restarts = [n for n, delta in enumerate(deltas) if delta.restart]
    assert restarts
    assert "".join(d.text for d in deltas[restarts[-1] :]) == ANSWER
    results = [
        r.body["result"] for r in seen if isinstance(r, FeedRecord) and r.kind == "tool-result"
    ]
    assert results == [ANSWER]
