"""`threadwarden submit --if-busy` (issue 29): ``reject`` refuses with exit 2 and writes nothing
while the thread has a submission that has not settled; ``interrupt`` aborts it and names it."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from tests.console.api import ledger_snapshot
from tests.console.helpers import wait_for_state
from tests.helpers.cli import run_cli
from threadwarden.client.client import ThreadwardenClient

pytestmark = pytest.mark.usefixtures("cli_env")


def _submit(thread: str, steps: list[dict[str, object]], *flags: str) -> list[str]:
    return ["submit", thread, "--agent", "scripted", "--input", json.dumps(steps), *flags]


@pytest.mark.usefixtures("worker")
async def test_submit_if_busy_reject_exits_2_naming_the_thread_and_writes_nothing(
    client: ThreadwardenClient,
    pool: asyncpg.Pool[Any],
    capsys: pytest.CaptureFixture[str],
    ids: str,
) -> None:
    waits = await client.submit(ids, agent_id="scripted", input=[{"approval": "x"}])
    await wait_for_state(client, ids, waits.submission_id, "suspended")
    before = (await ledger_snapshot(pool))[2:4]  # its pass may still be finishing: hosts move
    code = await run_cli(*_submit(ids, [{"say": "y"}], "--if-busy", "reject", "--json"))
    assert code == 2
    error = json.loads(capsys.readouterr().err)
    assert (error["code"], error["field"]) == ("thread_busy", "thread")
    assert (await ledger_snapshot(pool))[2:4] == before  # no submission, no record


@pytest.mark.usefixtures("worker")
async def test_submit_if_busy_interrupt_prints_what_it_interrupted(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    waits = await client.submit(ids, agent_id="scripted", input=[{"approval": "x"}])
    await wait_for_state(client, ids, waits.submission_id, "suspended")
    code = await run_cli(*_submit(ids, [{"say": "y"}], "--if-busy", "interrupt", "--wait", "60"))
    assert code == 0
    admitted, interrupted, settled = capsys.readouterr().out.strip().splitlines()
    assert admitted.startswith("admitted sub_")
    assert interrupted == f"interrupted {waits.submission_id}"
    assert settled == 'completed: {"said": ["y"]}'
    assert (await client.submission(waits.submission_id)).outcome == "aborted"


async def test_submit_if_busy_refuses_an_unknown_mode_with_exit_2(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    assert await run_cli(*_submit(ids, [{"say": "x"}], "--if-busy", "later")) == 2
    assert "if-busy" in capsys.readouterr().err
