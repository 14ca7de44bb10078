"""Live text in ``threadwarden watch`` (issue 31, item 3): a model's answer shows as it is
generated, beside the records, the whole text once and before the step's journaled response;
``--json`` prints it as delta lines, ``--no-text`` and ``--no-follow`` only the records. The
client's twin is tests/client/test_client_live_text.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from tests.helpers.cli import console, run_cli
from tests.helpers.feed import (
    ANSWER,
    DEADLINE_S,
    KINDS,
    STREAM,
    chunks_until,
    listening,
    text_so_far,
    without_inline_heads,
)
from tests.helpers.polling import eventually
from threadwarden.cli.watch import TEXT_MARK
from threadwarden.client.client import ThreadwardenClient
from threadwarden.config.settings import Settings

pytestmark = pytest.mark.usefixtures("cli_env", "worker")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The answer streams on the agent's queue, whole (see `without_inline_heads`)."""
    return without_inline_heads(settings)


async def test_watch_prints_the_answer_growing_then_its_record(
    client: ThreadwardenClient, ids: str
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
    client: ThreadwardenClient, pool: asyncpg.Pool[Any], ids: str
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


async def test_watch_no_follow_prints_the_records_without_live_text(
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
