"""`threadwarden submit --wait [SECONDS]` (issue 30, item 12): it prints the settlement and its
exit code says the outcome: 0 completed, 1 failed or aborted, 3 when the wait ended first (the
submission goes on)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.usefixtures("cli_env")


def _submit(thread: str, steps: list[dict[str, object]], *wait: str) -> list[str]:
    return ["submit", thread, "--agent", "scripted", "--input", json.dumps(steps), *wait]


@pytest.mark.usefixtures("worker")
async def test_submit_wait_prints_the_result_and_exits_0_when_completed(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    assert await run_cli(*_submit(ids, [{"say": "hello"}], "--wait", "60")) == 0
    admitted, settled = capsys.readouterr().out.strip().splitlines()
    assert admitted.startswith("admitted sub_") and f"on thread {ids}" in admitted
    assert settled == 'completed: {"said": ["hello"]}'


@pytest.mark.usefixtures("worker")
async def test_submit_wait_prints_the_reason_and_exits_1_when_failed(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    code = await run_cli(*_submit(ids, [{"fail": "out of stock"}], "--wait", "--json"))
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["thread_id"] == ids and report["created"] is True
    assert report["settlement"]["outcome"] == "failed"
    assert report["settlement"]["reason"] == "out of stock"


@pytest.mark.usefixtures("worker")
async def test_submit_wait_exits_3_when_the_wait_ends_first(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    code = await run_cli(*_submit(ids, [{"approval": "refund"}], "--wait", "0.5"))
    assert code == 3
    settled = capsys.readouterr().out.strip().splitlines()[-1]
    assert settled.endswith("not settled after 0.5 s; it goes on")


async def test_submit_wait_refuses_a_negative_wait_with_exit_2(
    capsys: pytest.CaptureFixture[str], ids: str
) -> None:
    assert await run_cli(*_submit(ids, [{"say": "x"}], "--wait", "-1")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "wait" in line and "seconds" in line, line
