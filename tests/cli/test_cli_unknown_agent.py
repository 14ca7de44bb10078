"""Issue 30 item 3: a submission for an agent no worker serves is admitted (the worker may start
later), with a warning on stderr and in the JSON receipt; its thread says why it waits."""

from __future__ import annotations

import json

import pytest

from tests.console.helpers import wait_for_state
from tests.helpers.cli import run_cli
from tests.helpers.polling import eventually
from threadwarden.client.client import ThreadwardenClient

pytestmark = pytest.mark.usefixtures("cli_env", "worker")


async def test_submit_for_an_unserved_agent_warns_and_status_says_why_it_waits(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    args = ["submit", ids, "--agent", "nobody-serves-me", "--input", "{}"]
    assert await run_cli(*args) == 0  # admitted, not refused
    captured = capsys.readouterr()
    assert captured.out.startswith("admitted sub_")
    [warning] = captured.err.strip().splitlines()
    assert warning.startswith("threadwarden: warning: no worker serves agent nobody-serves-me")

    assert await run_cli(*args, "--json", "--idempotency-key", "k2") == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["created"] is True and len(receipt["warnings"]) == 1
    assert "nobody-serves-me" in receipt["warnings"][0]

    async def head() -> tuple[str | None, str | None]:
        view = (await client.thread_status(ids)).submissions[0]
        return view.waiting_for, view.reason

    waiting, reason = await eventually(head, lambda v: v[0] == "binding", what="binding wait")
    assert reason is not None and "no worker serves agent nobody-serves-me" in reason
    assert await run_cli("status", "--thread", ids) == 0
    table = capsys.readouterr().out
    assert "binding" in table and "no worker serves agent nobody-serves-me" in table


async def test_submit_for_a_served_agent_has_no_warning(
    client: ThreadwardenClient, capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    first = await client.submit(ids, agent_id="scripted", input=[{"say": "hi"}])
    await wait_for_state(client, ids, first.submission_id, "completed")  # the worker is up
    assert await run_cli("submit", ids, "--agent", "scripted", "--input", "[]", "--json") == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["warnings"] == [] and captured.err == ""
