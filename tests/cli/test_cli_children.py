"""The CLI contract of a delegation (issue 13, item 5), with the scripted ``call`` step: the
parent's status says it waits for its child, the child's names its parent, the parent's result
lists its calls under ``children``, and ``watch`` shows the call's records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.polling import eventually


@pytest.mark.usefixtures("cli_env", "worker")
async def test_cli_a_delegation_shows_waiting_for_child_the_parent_and_the_calls(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    parent_thread, child_thread = f"{ids}-parent", f"{ids}-child"
    child_script = [{"approval": "publish the report?"}, {"say": "published"}]
    script = [{"call": {"thread": child_thread, "agent": "scripted", "input": child_script}}]
    assert (
        await run_cli(
            "submit", parent_thread, "--agent", "scripted", "--input", json.dumps(script), "--json"
        )
        == 0
    )
    parent_id = json.loads(capsys.readouterr().out)["submission_id"]

    async def status(thread: str) -> dict[str, Any]:
        code = await run_cli("status", "--thread", thread, "--json")
        out = capsys.readouterr().out
        return dict(json.loads(out)) if code == 0 else {"submissions": []}  # not admitted yet

    child = await eventually(
        lambda: status(child_thread),
        lambda s: bool(s["submissions"]) and s["submissions"][0]["waiting_for"] == "approval",
        what="the child waiting for its approval",
    )
    [child_view] = child["submissions"]
    assert (child_view["parent_submission_id"], child_view["parent_thread_id"]) == (
        parent_id,
        parent_thread,
    )
    [parent_view] = (await status(parent_thread))["submissions"]
    assert (parent_view["state"], parent_view["waiting_for"], parent_view["children"]) == (
        "suspended",
        "child",
        [child_view["submission_id"]],
    )
    # A person's inbox lists the child's approval, never the parent's wait for its child.
    assert await run_cli("inbox", "--json") == 0
    inbox = json.loads(capsys.readouterr().out)
    waiting = {entry["submission_id"] for entry in inbox["entries"]}
    assert child_view["submission_id"] in waiting and parent_id not in waiting

    assert await run_cli("approve", child_view["submission_id"], "--json") == 0
    capsys.readouterr()
    parent = await eventually(
        lambda: status(parent_thread),
        lambda s: s["submissions"][0]["state"] == "settled",
        what="the parent settled",
    )
    [parent_view] = parent["submissions"]
    assert (parent_view["outcome"], parent_view["waiting_for"]) == ("completed", None)

    assert await run_cli("watch", parent_thread, "--no-follow", "--json") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds == ["call-started", "children-awaited", "call-joined", "settlement"]
    assert records[-1]["body"]["result"]["children"] == [
        {
            "thread": child_thread,
            "submission_id": child_view["submission_id"],
            "outcome": "completed",
            "result": {"said": ["published"]},
        }
    ]
